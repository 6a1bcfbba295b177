"""What pyland's cpu.max enforcement costs: stress-ng throughput with 50 limited cgroups, in ONE boot.

Under pyland, one stress-ng CPU hog per cgroup runs seven times, alternating: every cgroup without a
quota (cpu.max "max": the BPF core has no limited cgroup and skips its cpu.max work) and every
cgroup with a quota too large to ever throttle (twice the machine: each tick and each stop
charges the task's chain of cgroups, each enqueue checks it). Alternating runs expose the guest's
own drift: each limited run is compared with the mean of the two quota-free runs around it. A last
run under the default scheduler, with the same quotas, is for scale.

Only hogs, so that the sum of their bogo-ops is the CPU work done: with a pipe ping-pong in every
tenth cgroup the CPU split between pipes and hogs moved from run to run (pipe 39k-49k ops/s against
hogs 118-54), whatever the quotas. The load is one pyland keeps up with on two emulated CPUs (its
backlog and rescue counters are printed): an overload of the Python loop, such as thousands of
sleeping threads, measures the overload, not cpu.max.

Usage: .venv/bin/python -m benchmarks.vm_cgroup_bw_bench [--seconds 10] [--cgroups 50]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.vm_stress_bench import WAIT_PYLAND
from tools.vm.api import VM

_OPS = re.compile(r"^\s*bogo-ops:\s*(\d+)", re.M)
RUNS = ("none1", "quota1", "none2", "quota2", "none3", "quota3", "none4")

GUEST = r"""#!/bin/bash
set -u
R=/results
S=/sys/fs/cgroup
cd /opt/scxctl
@WAIT_PYLAND@
echo "+cpu" > $S/cgroup.subtree_control
for i in $(seq {cgroups}); do mkdir -p $S/bw$i; done
quotas() { for i in $(seq {cgroups}); do echo "$1" > $S/bw$i/cpu.max; done; }
# stress NAME: one stress-ng instance per cgroup, all at once
stress() {
    local pids=() t0=$(date +%s.%N)
    for i in $(seq {cgroups}); do
        sh -c "echo \$\$ > $S/bw$i/cgroup.procs; exec stress-ng --cpu 1 --timeout {seconds}s \
            --metrics-brief --yaml $R/$1-$i.yaml" >/dev/null 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    echo "$t0 $(date +%s.%N)" >$R/$1.window
}
scxctl --log-format json run --stats-interval 5 >"$R/pyland.log" 2>&1 &
pid=$!
wait_pyland
quotas max; stress none1
quotas "{quota} 100000"; stress quota1
quotas max; stress none2
quotas "{quota} 100000"; stress quota2
quotas max; stress none3
quotas "{quota} 100000"; stress quota3
quotas max; stress none4
cat /sys/kernel/sched_ext/state >"$R/state_after.txt"
kill -TERM $pid; wait $pid; echo $? >"$R/pyland.rc"
quotas "{quota} 100000"; stress default
"""


def throughput(results: Path, name: str, n: int) -> float:
    """The run's bogo-ops summed over its hogs, per second of the run's whole window.

    Not the sum of each instance's own rate: under TCG the 50 instances start over a second or
    more, and an instance that ran its 10 s beside fewer others has a higher rate of its own.
    """
    ops = 0
    for i in range(1, n + 1):
        y = results / f"{name}-{i}.yaml"
        if y.exists():
            m = _OPS.search(y.read_text())
            ops += int(m.group(1)) if m else 0
    t0, t1 = map(float, (results / f"{name}.window").read_text().split())
    return ops / (t1 - t0)


def all_stats(log: Path) -> list[dict[str, int]]:
    lines = log.read_text().splitlines()
    return [json.loads(ln) for ln in lines if ln.startswith("{") and '"pyland stats"' in ln]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--cgroups", type=int, default=50)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="vm_cgroup_bw_bench."))
    script = work / "bench.sh"
    quota = 2 * args.cpus * 100000  # twice the machine per period: charged and checked, never throttled
    script.write_text(GUEST.replace("@WAIT_PYLAND@", WAIT_PYLAND).replace("{cgroups}", str(args.cgroups))
                      .replace("{seconds}", str(args.seconds)).replace("{quota}", str(quota)))
    res = VM(lambda: Path(tempfile.mkdtemp(dir=work))).run(
        "bash /tmp/bench.sh", timeout=12 * args.seconds + 900, cpus=args.cpus,
        copy=[(str(script), "/tmp/bench.sh")])
    if res.returncode != 0:
        print(f"guest run failed ({res.message}): {res.output[-2000:]}", file=sys.stderr)
        return 1
    r = res.results
    runs = {name: throughput(r, name, args.cgroups) for name in (*RUNS, "default")}
    state = (r / "state_after.txt").read_text().strip() if (r / "state_after.txt").exists() else "?"
    rc = (r / "pyland.rc").read_text().strip() if (r / "pyland.rc").exists() else "?"
    stats = all_stats(r / "pyland.log") or [{}]
    print(f"pyland state after its runs: {state}; exit {rc}; last stats: "
          + ", ".join(f"{k}={stats[-1].get(k)}" for k in ("nr_backlog", "nr_rescued", "nr_ring_full",
                                                         "nr_bw_held", "nr_bw_overdue"))
          + f"; limited cgroups seen by the BPF core: up to {max(s.get('nr_bw_cgroups', 0) for s in stats)}")
    if state != "enabled" or rc != "0":
        print(f"pyland did not run all of its loads (see {r / 'pyland.log'}): no cost to report",
              file=sys.stderr)
        return 1
    print(f"\n{args.cgroups} CPU hogs in as many cgroups, {args.seconds} s a run, {args.cpus} vCPUs "
          f"({res.accel}), one boot: bogo-ops per second of each run's window")
    print("  ".join(f"{n}={runs[n]:.1f}" for n in RUNS) + f"  default+quota={runs['default']:.1f}")
    # each quota run against the mean of the two quota-free runs around it
    ratios = [runs[RUNS[i]] / ((runs[RUNS[i - 1]] + runs[RUNS[i + 1]]) / 2) for i in range(1, len(RUNS), 2)]
    nones = [runs[n] for n in RUNS[0::2]]
    print(f"quota / neighbouring no-quota runs: {', '.join(f'{x:.3f}' for x in ratios)}; "
          f"mean {statistics.mean(ratios):.3f}")
    print(f"no-quota runs among themselves: {min(nones):.1f}-{max(nones):.1f} "
          f"({(max(nones) / min(nones) - 1) * 100:.0f}% apart: the guest's own noise)")
    print(f"(raw files: {r})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
