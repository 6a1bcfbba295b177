"""pyland loop throughput on the host with real maps: records in, decisions out, per core.

bpf/tests/pyland_loop.bpf.o feeds the `queued` RINGBUF (BPF_PROG_TEST_RUN) and drains the
`dispatched_big` USER_RINGBUF, exactly the maps the scheduler uses. The loop's own cost is its
thread CPU time around SchedulerLoop.step() (read_batch + Task fill + policy.decide + pack/write +
publish + sched_yield); the feeding and draining programs are timed separately, so
decisions/s per core = decisions / loop CPU seconds. Target: >= 200,000/s with the default policy.

Usage (root, after `make -C bpf`): .venv/bin/python -m benchmarks.loop_bench [--rounds N] [--records N]
"""

from __future__ import annotations

import argparse
import gc
import os
import struct
import sys
import time
from pathlib import Path

from benchmarks.floor_policy import EchoPolicy
from scxctl.bpf.libbpf import BpfObject
from scxctl.bpf.ringbuf import open_reader, open_writer
from scxctl.pyland.loop import SchedulerLoop
from scxctl.pyland.policies.loader import load_policy
from scxctl.pyland.policy import PolicyOptions
from scxctl.pyland.shared import SharedState

ROOT = Path(__file__).resolve().parent.parent
OBJ = ROOT / "bpf" / "build" / "tests" / "pyland_loop.bpf.o"
FEED_ARGS = struct.Struct("=QiIQQII")
TARGET = 200_000




def bench(policy_name: str, rounds: int, records: int, batch: int) -> dict[str, float]:
    opts = PolicyOptions(nr_cpus=os.cpu_count() or 1)
    policy = EchoPolicy(opts) if policy_name == "echo" else load_policy(policy_name, opts)
    with BpfObject.open(OBJ) as obj:
        obj.load()
        shared = SharedState(obj.map(".bss").initial_value())
        reader = open_reader(obj.map("queued").fd)
        writer = open_writer(obj.map("dispatched_big").fd)
        feed, drain = obj.program("feed"), obj.program("drain_big")
        loop = SchedulerLoop(reader, writer, shared, policy, batch=batch)
        loop_cpu = loop_wall = feed_cpu = drain_cpu = 0
        decided = 0
        gc.collect()
        gc.freeze()
        gc.disable()  # as the scheduler runs
        try:
            for r in range(rounds):
                t0 = time.thread_time_ns()
                fed = feed.test_run(FEED_ARGS.pack(records, 1000, 0, r * records, 0, 1, 100))
                feed_cpu += time.thread_time_ns() - t0
                if fed != records:
                    raise SystemExit(f"feed() queued {fed} of {records} records")
                c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
                n = 0
                while n < records:
                    n += loop.step()
                loop_cpu += time.thread_time_ns() - c0
                loop_wall += time.perf_counter_ns() - w0
                decided += n
                t0 = time.thread_time_ns()
                if drain.test_run() != records:
                    raise SystemExit("drain() did not get every decision back")
                drain_cpu += time.thread_time_ns() - t0
        finally:
            gc.enable()
            reader.close()
            writer.close()
            shared.release()
    return {
        "decisions": decided,
        "per_core_per_s": decided / (loop_cpu / 1e9),
        "per_wall_s": decided / (loop_wall / 1e9),
        "loop_ns_per_decision": loop_cpu / decided,
        "feed_ns_per_record": feed_cpu / decided,
        "drain_ns_per_decision": drain_cpu / decided,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--records", type=int, default=4096, help="records fed per round (<= 4096)")
    ap.add_argument("--policies", default="echo,fifo,deadline")
    ap.add_argument("--batches", default="256,4096", help="loop batch sizes to compare")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("loop_bench: needs root (BPF maps and BPF_PROG_TEST_RUN)", file=sys.stderr)
        return 3
    if not OBJ.is_file():
        print(f"loop_bench: {OBJ} missing: run make -C bpf", file=sys.stderr)
        return 7
    print(f"pyland loop, host, real RINGBUF/USER_RINGBUF maps, {args.rounds} x {args.records} records; "
          f"target {TARGET:,} decisions/s per core")
    print(f"{'policy':>9} {'batch':>6} {'decisions/s/core':>17} {'x target':>9} {'loop ns/dec':>12} "
          f"{'wall dec/s':>11} {'feed ns/rec':>12} {'drain ns/dec':>13}")
    for name in args.policies.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            r = bench(name, args.rounds, args.records, batch)
            print(f"{name:>9} {batch:>6} {r['per_core_per_s']:>17,.0f} {r['per_core_per_s'] / TARGET:>9.2f} "
                  f"{r['loop_ns_per_decision']:>12,.0f} {r['per_wall_s']:>11,.0f} "
                  f"{r['feed_ns_per_record']:>12,.0f} {r['drain_ns_per_decision']:>13,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
