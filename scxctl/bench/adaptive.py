"""schtest's adaptive_priority: does the scheduler favour the task that sleeps a lot?

Four processes pinned to one CPU (schtest: two processes with two threads each; see procs.py for
why we use a process per role). Slow worker: wait slow_sem, spin 10 ms, post slow_sem_ret. Fast
worker: wait fast_sem, spin 100 us, sleep 9.9 ms, post fast_sem_ret. Each controller does `iters`
round trips of post(sem) then wait(sem_ret). Only the controller -> worker wake-ups are sampled.
metric = p90(fast wake latency) / p90(slow wake latency); pass when < 0.50.
"""

from __future__ import annotations

import time
from typing import Any

from scxctl.bench.converge import Measurement, converge, final
from scxctl.bench.env import Env
from scxctl.bench.futex import Arena, Semaphore
from scxctl.bench.procs import Controller, WorkloadGroup, spin_for_ns, wait_ready
from scxctl.bench.stats import summarize

NAME = "adaptive_priority"
THRESHOLD = 0.50
DIRECTION = "<"  # pass when metric < THRESHOLD
MIN_SAMPLES = 20  # below this on either side the ratio is flagged UNRELIABLE

SLOW_SPIN_NS = 10_000_000
FAST_SPIN_NS = 100_000
FAST_SLEEP_S = (10_000_000 - 100_000) / 1e9


def _controller(ctl: Controller, sem: Semaphore, ret: Semaphore) -> None:
    while True:
        for _ in range(ctl.get_iters()):
            sem.post()
            ret.wait(sample=False)


def _slow_worker(sem: Semaphore, ret: Semaphore) -> None:
    while True:
        sem.wait()
        spin_for_ns(SLOW_SPIN_NS)
        ret.post()


def _fast_worker(sem: Semaphore, ret: Semaphore) -> None:
    while True:
        sem.wait()
        spin_for_ns(FAST_SPIN_NS)
        time.sleep(FAST_SLEEP_S)
        ret.post()


def run(env: Env, cpu: int, min_time: float, max_time: float, out: list[Measurement]) -> Measurement:
    """Run to convergence, appending every measurement to `out`; returns the final one."""
    arena = Arena()
    slow_sem, slow_ret, fast_sem, fast_ret = (arena.semaphore() for _ in range(4))
    slow_ctl, fast_ctl = Controller(arena), Controller(arena)
    with WorkloadGroup(env.sched_ext) as group:
        group.spawn("slow-worker", lambda: _slow_worker(slow_sem, slow_ret), {cpu})
        group.spawn("slow-ctl", lambda: _controller(slow_ctl, slow_sem, slow_ret), {cpu})
        group.spawn("fast-worker", lambda: _fast_worker(fast_sem, fast_ret), {cpu})
        group.spawn("fast-ctl", lambda: _controller(fast_ctl, fast_sem, fast_ret), {cpu})
        ready = [slow_ctl.ready, fast_ctl.ready]
        wait_ready(ready, group, env.tick, time.monotonic() + env.round_timeout_s, "start-up")

        def measure(iters: int) -> tuple[float | None, dict[str, Any]]:
            slow_sem.collect()
            fast_sem.collect()
            slow_ctl.begin(iters)
            fast_ctl.begin(iters)
            wait_ready(ready, group, env.tick, time.monotonic() + env.round_timeout_s, f"a round of {iters}")
            fast = summarize(*fast_sem.collect())
            slow = summarize(*slow_sem.collect())
            metric = None
            if fast.p90_ns is not None and slow.p90_ns:
                metric = fast.p90_ns / slow.p90_ns
            unreliable = min(fast.count, slow.count) < MIN_SAMPLES
            return metric, {"unreliable": unreliable, "fast": fast.to_json(), "slow": slow.to_json()}

        result = converge(measure, min_time, max_time, out, on_start=env.on_start, on_done=env.on_done)
    return final(out) or result
