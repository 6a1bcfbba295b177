"""`scxctl bench --trace`: the kernel's wake-up to run latency of the sampled workers, per measurement.

The futex-measured latencies (scxctl.bench.futex) run from the waker's timestamp before FUTEX_WAKE
to the wakee's after FUTEX_WAIT returns, so they include two syscalls and the interpreter. The same
workers' wake-ups measured in the kernel (scxctl.trace.wakeup: sched_waking to sched_switch) are
the scheduler's own delay; the two side by side show how much of a latency is the harness. The
kernel counts every wake-up of a worker (also the fast worker's timer wake-ups after its sleep and
preemptions), not only the sampled semaphore waits.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from scxctl.bench.converge import Measurement
from scxctl.bench.env import Env
from scxctl.errors import PermissionDenied
from scxctl.trace.hist import Histogram

# the adaptive_priority roles whose wake-ups the futex samples time -> their task name (procs.py
# names each process scxbench-ROLE, cut to the kernel's 15 characters)
ROLES = {"fast": "fast-worker", "slow": "slow-worker"}
ESTIMATE = "kernel sched_waking -> sched_switch; percentiles from quarter-octave buckets (within 25%)"


def task_name(role: str) -> str:
    return f"scxbench-{role}"[:15]


def summary(h: Histogram) -> dict[str, Any]:
    rows = [{"low_ns": lo, "high_ns": hi, "count": n} for lo, hi, n in h.log2_rows()]
    return {**h.summary(), "histogram": rows}


class BenchTracer:
    """One compiled tracer for the whole bench (bcc compiles for seconds); read around each measurement."""

    def __init__(self) -> None:
        from scxctl.trace.wakeup import Selector, open_tracer

        if os.geteuid() != 0:
            raise PermissionDenied("--trace loads BPF programs (bcc): run scxctl bench as root")
        self.sides = list(ROLES)
        self._tracer = open_tracer(Selector(comms=tuple(task_name(ROLES[s]) for s in self.sides)))
        self._before: list[Histogram] | None = None

    @property
    def compile_s(self) -> float:
        return self._tracer.compile_s

    def begin(self) -> None:
        self._before = self._tracer.read()

    def end(self) -> dict[str, Any]:
        from scxctl.trace.wakeup import interval_hists

        now = self._tracer.read()
        before = self._before if self._before is not None else [Histogram() for _ in now]
        hists = interval_hists(now, before)
        self._before = None
        return {"source": ESTIMATE, **{side: summary(h) for side, h in zip(self.sides, hists, strict=True)}}

    def wrap(self, env: Env) -> Env:
        """The env with each measurement's trace added to its detail (and so to the report)."""
        outer_start, outer_done = env.on_start, env.on_done

        def on_start(index: int, iters: int) -> None:
            self.begin()
            outer_start(index, iters)

        def on_done(m: Measurement) -> None:
            m.detail["trace"] = self.end()
            outer_done(m)

        return dataclasses.replace(env, on_start=on_start, on_done=on_done)

    def close(self) -> None:
        self._tracer.close()
