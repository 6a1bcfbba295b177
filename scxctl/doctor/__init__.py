"""`scxctl doctor`: can this machine run sched_ext schedulers, and pyland in particular?"""
