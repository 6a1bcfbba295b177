"""What pyland's cpu.max enforcement costs: stress-ng throughput with 50 limited cgroups, in ONE boot.

Under pyland, a stress-ng mix spread over 50 cgroups runs three times: every cgroup without a
quota (cpu.max "max": the BPF core has no limited cgroup and skips all of its cpu.max work), every
cgroup with a quota too large to ever throttle (twice the machine: each tick and each stop charges
the task's chain of cgroups, each enqueue checks it), and without quotas again (the drift of the
guest itself). The ratio of the middle run to the mean of the others is the cost. A fourth run,
under the default scheduler with the same quotas, is for scale.

Usage: .venv/bin/python -m benchmarks.vm_cgroup_bw_bench [--seconds 15] [--cgroups 50]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks.vm_stress_bench import WAIT_PYLAND, parse_yaml_metrics
from tools.vm.api import VM

GUEST = r"""#!/bin/bash
set -u
R=/results
S=/sys/fs/cgroup
cd /opt/scxctl
@WAIT_PYLAND@
echo "+cpu" > $S/cgroup.subtree_control
for i in $(seq {cgroups}); do mkdir -p $S/bw$i; done
quotas() { for i in $(seq {cgroups}); do echo "$1" > $S/bw$i/cpu.max; done; }
# stress NAME: one stress-ng instance per cgroup (a --cpu, --switch or --sleep worker each), at once
stress() {
    local pids=() kinds=(cpu switch sleep)
    for i in $(seq {cgroups}); do
        local k=${kinds[$((i % 3))]}
        # --sleep-max 64: stress-ng's default 1024 threads per sleep worker, 16 workers on two
        # TCG vCPUs, is an overload of its own that ended in a stall ejection (a cost not of cpu.max)
        sh -c "echo \$\$ > $S/bw$i/cgroup.procs; exec stress-ng --$k 1 --sleep-max 64 --timeout {seconds}s \
            --metrics-brief --yaml $R/$1-$i.yaml" >/dev/null 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
}
scxctl --log-format json run --stats-interval 5 >"$R/pyland.log" 2>&1 &
pid=$!
wait_pyland
quotas max; stress plain
quotas "{quota} 100000"; stress limited
quotas max; stress plain2
cat /sys/kernel/sched_ext/state >"$R/state_after.txt"
kill -TERM $pid; wait $pid; echo $? >"$R/pyland.rc"
quotas "{quota} 100000"; stress default
"""


def totals(results: Path, name: str, n: int) -> dict[str, float]:
    """bogo-ops/s per stressor summed over the cgroups of one run."""
    out: dict[str, float] = {}
    for i in range(1, n + 1):
        y = results / f"{name}-{i}.yaml"
        if y.exists():
            for stressor, value in parse_yaml_metrics(y.read_text()).items():
                out[stressor] = out.get(stressor, 0.0) + value
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--cgroups", type=int, default=50)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="vm_cgroup_bw_bench."))
    script = work / "bench.sh"
    quota = 2 * args.cpus * 100000  # twice the machine per period: charged and checked, never throttled
    script.write_text(GUEST.replace("@WAIT_PYLAND@", WAIT_PYLAND).replace("{cgroups}", str(args.cgroups))
                      .replace("{seconds}", str(args.seconds)).replace("{quota}", str(quota)))
    res = VM(lambda: Path(tempfile.mkdtemp(dir=work))).run(
        "bash /tmp/bench.sh", timeout=8 * args.seconds + 600, cpus=args.cpus,
        copy=[(str(script), "/tmp/bench.sh")])
    if res.returncode != 0:
        print(f"guest run failed ({res.message}): {res.output[-2000:]}", file=sys.stderr)
        return 1
    r = res.results
    runs = {name: totals(r, name, args.cgroups) for name in ("plain", "limited", "plain2", "default")}
    state = (r / "state_after.txt").read_text().strip() if (r / "state_after.txt").exists() else "?"
    rc = (r / "pyland.rc").read_text().strip() if (r / "pyland.rc").exists() else "?"
    print(f"pyland state after its runs: {state}; exit {rc}")
    if state != "enabled" or rc != "0":
        print(f"pyland did not run all three of its loads (see {r / 'pyland.log'}): no cost to report",
              file=sys.stderr)
        return 1
    print(f"\n{args.cgroups} cgroups, {args.seconds} s, {args.cpus} vCPUs ({res.accel}): "
          "bogo-ops/s summed, one boot")
    print(f"{'stressor':>10} {'no quota':>12} {'quota':>12} {'no quota#2':>12} {'quota/none':>11} "
          f"{'default+quota':>14}")
    for s in sorted(set(runs["plain"]) | set(runs["limited"])):
        a, b, c, d = (runs[k].get(s, float("nan")) for k in ("plain", "limited", "plain2", "default"))
        base = (a + c) / 2
        ratio = b / base if base else float("nan")
        print(f"{s:>10} {a:>12.1f} {b:>12.1f} {c:>12.1f} {ratio:>11.3f} {d:>14.1f}")
    print(f"(raw files: {r})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
