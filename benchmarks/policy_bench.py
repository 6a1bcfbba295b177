"""Cost of policy.decide() per call, for each built-in policy, measured side by side in one run.

    .venv/bin/python -m benchmarks.policy_bench [--records N] [--repeat R] [POLICY.py ...]

Replays one recorded stream of task records (hogs, short-burst wakers, pinned tasks, several
weights, produced by the emulated BPF bookkeeping) through each policy the way the scheduler loop
does: fill the ONE reused Task from the unpacked record tuple, decide() into the ONE reused
Decision, pack the decision into a record buffer. A "null" policy (the echo policy) is the
baseline; "decide" = that policy's time minus the null policy's, i.e. the policy's own cost.
Target: the whole loop >= 200,000 decisions/s per core including ring I/O, so decide()
should stay around 1-2 us. Ring buffer I/O itself is measured by the loop/ringbuf benchmarks.
"""

from __future__ import annotations

import argparse
import gc
import logging
import random
import statistics
import sys
import time
from pathlib import Path

from benchmarks.floor_policy import EchoPolicy
from scxctl import log as logsetup
from scxctl.pyland.policies.emulate import EmulatedTask, enqueue
from scxctl.pyland.policies.loader import load_policy
from scxctl.pyland.policy import Decision, Policy, PolicyOptions, Task
from scxctl.pyland.records import DECISION, DECISION_DIRECT_WAKE, DECISION_PREEMPT, TASK

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "policies"




def record_stream(n: int, nr_cpus: int, seed: int = 1) -> list[tuple[object, ...]]:
    """`n` unpacked pyland_task tuples from a mixed workload, as read_batch would return them."""
    rng = random.Random(seed)
    recorder = load_policy("deadline", PolicyOptions(nr_cpus=nr_cpus))
    tasks = [
        EmulatedTask(
            1000 + i,
            cpu=i % nr_cpus,
            nr_cpus_allowed=1 if i % 7 == 0 else nr_cpus,
            weight=rng.choice((100, 100, 100, 50, 400, 10000)),
            comm=f"task-{i}".encode(),
        )
        for i in range(256)
    ]
    task, decision = Task(), Decision()
    buf = bytearray(TASK.size)
    out = []
    now = 0
    for _ in range(n):
        et = rng.choice(tasks)
        hog = et.pid % 3 == 0
        seg = rng.randrange(500_000, 1_000_000) if hog else rng.randrange(5_000, 200_000)
        et.ran(now, now + seg)
        now += seg
        enqueue(recorder, et, wakeup=not hog or rng.random() < 0.1, task=task, decision=decision)
        TASK.pack_into(buf, 0, *(getattr(task, f) for f in Task.__slots__))
        out.append(TASK.unpack_from(buf))
    return out


def replay(policy: Policy, records: list[tuple[object, ...]], pack: bool) -> tuple[int, int]:
    """(wall ns, thread CPU ns) to push every record through `policy` the loop's way."""
    task, decision = Task(), Decision()
    decide = policy.decide
    out = bytearray(DECISION.size)
    pack_into = DECISION.pack_into
    wall0, cpu0 = time.perf_counter_ns(), time.thread_time_ns()
    if pack:
        for rec in records:
            (task.pid, task.cpu, task.nr_cpus_allowed, task.flags, task.start_ts, task.stop_ts,
             task.exec_runtime, task.weight, task.placed, task.vtime, task.enq_cnt, task.comm,
             task.cgroup_id, task.throttled, task.run_ns, task.kind, task.nr_wakeups, task.waker,
             task.class_id, task.deadline, task.sleep_ns, task.min_burst_ns) = rec  # fmt: skip
            decide(task, decision)
            pack_into(out, 0, decision.pid, decision.cpu,
                      (DECISION_PREEMPT if decision.preempt else 0) |
                      (DECISION_DIRECT_WAKE if decision.direct_wake else 0), decision.slice_ns,
                      decision.deadline, decision.vtime, decision.enq_cnt)  # fmt: skip
    else:
        for rec in records:
            (task.pid, task.cpu, task.nr_cpus_allowed, task.flags, task.start_ts, task.stop_ts,
             task.exec_runtime, task.weight, task.placed, task.vtime, task.enq_cnt, task.comm,
             task.cgroup_id, task.throttled, task.run_ns, task.kind, task.nr_wakeups, task.waker,
             task.class_id, task.deadline, task.sleep_ns, task.min_burst_ns) = rec  # fmt: skip
            decide(task, decision)
    return time.perf_counter_ns() - wall0, time.thread_time_ns() - cpu0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per measurement")
    parser.add_argument("--repeat", type=int, default=5, help="measurements per policy (best is kept)")
    parser.add_argument("--nr-cpus", type=int, default=2)
    parser.add_argument("files", nargs="*", metavar="POLICY.py", help="policy files (default: the examples)")
    args = parser.parse_args(argv)
    logsetup.configure("console", logging.WARNING)

    opts = PolicyOptions(nr_cpus=args.nr_cpus)
    records = record_stream(args.records, args.nr_cpus)
    files = args.files or [str(p) for p in sorted(EXAMPLES.glob("*.py"))]
    specs = ["null", "fifo", "deadline", *files]
    gc.collect()
    gc.disable()  # as in the scheduler loop: no collector pause inside a measurement
    rows = []
    try:
        for pack in (False, True):
            per: dict[str, list[float]] = {s: [] for s in specs}
            cpu_per: dict[str, list[float]] = {s: [] for s in specs}
            for _ in range(args.repeat):  # interleaved, so drift hits every policy alike
                for spec in specs:
                    policy = EchoPolicy(opts) if spec == "null" else load_policy(spec, opts)
                    wall, cpu = replay(policy, records, pack)
                    per[spec].append(wall / len(records))
                    cpu_per[spec].append(cpu / len(records))
            rows.append((pack, per, cpu_per))
    finally:
        gc.enable()

    print(
        f"python {sys.version.split()[0]}, {len(records)} records x {args.repeat} runs; ns per record: "
        "wall best, thread CPU best and median (CPU time is what the policy costs when other "
        "processes share the core); own = CPU best minus the null policy's"
    )
    for pack, per, cpu_per in rows:
        base = min(cpu_per["null"])
        print("\n" + ("fill + decide + pack decision:" if pack else "fill + decide:"))
        head = ("policy", "wall", "cpu", "cpu med", "own", "x null", "decisions/s")
        print(f"{head[0]:<16}" + "".join(f"{h:>10}" for h in head[1:6]) + f"{head[6]:>14}")
        for spec in specs:
            cpu = min(cpu_per[spec])
            name = Path(spec).name if spec.endswith(".py") else spec
            cols = (min(per[spec]), cpu, statistics.median(cpu_per[spec]), cpu - base)
            ratio = f"{cpu / base:>10.2f}{1e9 / cpu:>14,.0f}"
            print(f"{name:<16}" + "".join(f"{c:>10.0f}" for c in cols) + ratio)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
