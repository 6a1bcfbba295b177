"""pyland: a sched_ext scheduler whose scheduling decisions are made in Python.

A small BPF core hands runnable tasks to one Python loop through a ring buffer; the loop asks a
policy (scxctl.pyland.policy) for a decision per task and returns it through a user ring buffer.
The policy layer is kept apart from the mechanism so that users can swap it (--policy FILE.py).
"""
