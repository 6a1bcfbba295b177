"""scxctl: run, manage and measure sched_ext schedulers, including pyland."""

__version__ = "0.1.0"
