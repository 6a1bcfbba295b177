"""`scxctl bench`: schtest's adaptive_priority and fairness tests, measured the way schtest does.

Modules, one job each: `futex` (shared-memory semaphores), `procs` (forked, pinned workload
processes), `stats` (reservoir and schtest's t-digest quantiles), `converge` (schtest's iteration
scaling), `topology` (CPUs and per-process CPU time from /sys and /proc), `overhead`, `adaptive`,
`fairness` (the tests), `scheduler` (start, watch and stop the scheduler under test), `runner`
(tests x schedulers, persisted results), `schema` (the JSON report) and `render` (terminal output).
"""
