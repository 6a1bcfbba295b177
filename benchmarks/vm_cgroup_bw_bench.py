"""What pyland's cpu.max enforcement costs: CPU work done by 50 hogs in 50 limited cgroups, ONE boot.

50 CPU hogs (benchmarks/native/work_hog.c), one per cgroup, run throughout under pyland while the
cgroups' quotas alternate, phase after phase: no quota (cpu.max "max": the BPF core has no limited
cgroup and skips its cpu.max work), then a quota too large to ever throttle (twice the machine:
each tick and each stop charges the task's chain of cgroups, each enqueue checks it), and so on,
seven phases. Each phase settles for a second, then counts the units of work the hogs report
over SECONDS: no process starts inside a phase (under TCG, starting 50 processes took longer than
a phase, and sums of per-process rates moved by 15% between identical runs). Each quota phase is
compared with the mean of the quota-free phases around it, so the guest's own drift shows as the
spread of the quota-free phases. Two more phases under the default scheduler give the scale.

The hogs never wake anyone: the wake-up path's share of the cost is not in this figure (with a
pipe ping-pong beside the hogs, the split of the CPU between them moved from run to run whatever
the quotas). pyland's backlog and rescue counters are printed: a load that overloads the Python
loop measures the overload, not cpu.max.

Usage: .venv/bin/python -m benchmarks.vm_cgroup_bw_bench [--seconds 10] [--cgroups 50]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.vm_stress_bench import WAIT_PYLAND
from scxctl.pyland.stats_log import stats_lines
from tools.vm.api import VM

PYLAND_PHASES = ("none1", "quota1", "none2", "quota2", "none3", "quota3", "none4")
DEFAULT_PHASES = ("default_none", "default_quota")
ROOT = Path(__file__).resolve().parent.parent

GUEST = r"""#!/bin/bash
set -u
R=/results
S=/sys/fs/cgroup
HOG=/opt/scxctl/benchmarks/native/build/work-hog
cd /opt/scxctl
@WAIT_PYLAND@
echo "+cpu" > $S/cgroup.subtree_control
for i in $(seq {cgroups}); do mkdir -p $S/bw$i; done
quotas() { for i in $(seq {cgroups}); do echo "$1" > $S/bw$i/cpu.max; done; }
phases() {  # phases NAME...: one line each in phases.txt: NAME WORK0 NS0 WORK1 NS1
    local p a b
    for p in "$@"; do
        case $p in *quota*) quotas "{quota} 100000" ;; *) quotas max ;; esac
        sleep 1
        a=$($HOG read /tmp/work.ctr {cgroups}); sleep {seconds}; b=$($HOG read /tmp/work.ctr {cgroups})
        echo "$p $a $b" >>$R/phases.txt
    done
}
scxctl --log-format json run --stats-interval 5 >"$R/pyland.log" 2>&1 &
pid=$!
wait_pyland
$HOG run /tmp/work.ctr {cgroups} $S/bw &
hogs=$!
sleep 3
phases @PYLAND_PHASES@
cat /sys/kernel/sched_ext/state >"$R/state_after.txt"
kill -TERM $pid; wait $pid; echo $? >"$R/pyland.rc"
phases @DEFAULT_PHASES@
kill $hogs; wait $hogs
exit 0
"""


def rates(phases_txt: str) -> dict[str, float]:
    """Units of work per second of each phase, from the hogs' counters read at its start and end."""
    out: dict[str, float] = {}
    for line in phases_txt.splitlines():
        name, w0, t0, w1, t1 = line.split()
        out[name] = (int(w1) - int(w0)) / ((int(t1) - int(t0)) / 1e9)
    return out


def quota_ratios(r: dict[str, float]) -> list[float]:
    """Each quota phase against the mean of the quota-free phases before and after it."""
    p = PYLAND_PHASES
    return [r[p[i]] / ((r[p[i - 1]] + r[p[i + 1]]) / 2) for i in range(1, len(p), 2)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--cgroups", type=int, default=50)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args(argv)
    subprocess.run(["make", "-s", "-C", str(ROOT / "benchmarks" / "native")], check=True)
    work = Path(tempfile.mkdtemp(prefix="vm_cgroup_bw_bench."))
    script = work / "bench.sh"
    quota = 2 * args.cpus * 100000  # twice the machine per period: charged and checked, never throttled
    text = GUEST.replace("@WAIT_PYLAND@", WAIT_PYLAND).replace("@PYLAND_PHASES@", " ".join(PYLAND_PHASES))
    text = text.replace("@DEFAULT_PHASES@", " ".join(DEFAULT_PHASES))
    script.write_text(text.replace("{cgroups}", str(args.cgroups)).replace("{seconds}", str(args.seconds))
                      .replace("{quota}", str(quota)))
    res = VM(lambda: Path(tempfile.mkdtemp(dir=work))).run(
        "bash /tmp/bench.sh", timeout=12 * args.seconds + 900, cpus=args.cpus,
        copy=[(str(script), "/tmp/bench.sh")], single_on_last_retry=False)
    if res.returncode != 0:
        print(f"guest run failed ({res.message}): {res.output[-2000:]}", file=sys.stderr)
        return 1
    r = res.results
    state = (r / "state_after.txt").read_text().strip() if (r / "state_after.txt").exists() else "?"
    rc = (r / "pyland.rc").read_text().strip() if (r / "pyland.rc").exists() else "?"
    stats = stats_lines((r / "pyland.log").read_text()) or [{}]
    print(f"pyland state after its phases: {state}; exit {rc}; last stats: "
          + ", ".join(f"{k}={stats[-1].get(k)}" for k in ("nr_backlog", "nr_rescued", "nr_ring_full",
                                                         "nr_bw_held", "nr_bw_overdue"))
          + f"; limited cgroups seen by the BPF core: up to {max(s.get('nr_bw_cgroups', 0) for s in stats)}")
    if state != "enabled" or rc != "0":
        print(f"pyland did not run all of its phases (see {r / 'pyland.log'}): no cost to report",
              file=sys.stderr)
        return 1
    v = rates((r / "phases.txt").read_text())
    print(f"\n{args.cgroups} hogs in as many cgroups, {args.seconds} s a phase, {args.cpus} vCPUs "
          f"({res.accel}), one boot: units of work per second")
    print("  ".join(f"{n}={v[n]:.0f}" for n in (*PYLAND_PHASES, *DEFAULT_PHASES)))
    ratios = quota_ratios(v)
    nones = [v[n] for n in PYLAND_PHASES[0::2]]
    print(f"quota / the quota-free phases around it: {', '.join(f'{x:.3f}' for x in ratios)}; "
          f"mean {statistics.mean(ratios):.3f}")
    print(f"quota-free phases among themselves: {min(nones):.0f}-{max(nones):.0f} "
          f"({(max(nones) / min(nones) - 1) * 100:.1f}% apart: the guest's own noise)")
    print(f"default scheduler, quota / none: {v['default_quota'] / v['default_none']:.3f}")
    print(f"(raw files: {r})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
