"""stress-ng bogo-ops under pyland vs the default scheduler, side by side in ONE guest boot.

Order in the guest: default (fair) -> pyland -> default again (the second default run shows how
much the guest drifts by itself). Under TCG absolute numbers mean little; the ratio pyland/default
measured in the same boot is the result. Runs as root on the host (boots QEMU through tools/vm).

Usage: .venv/bin/python -m benchmarks.vm_stress_bench [--seconds 20] [--policy deadline] [--cpus 2]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from scxctl.pyland.stats_log import stats_lines
from tools.vm.api import VM

# shell: wait (at most 90 s) until the kernel runs pyland; shared by the VM benchmarks' guest scripts
WAIT_PYLAND = r"""
wait_pyland() {
    for _ in $(seq 1 900); do
        [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] \
            && [ "$(cat /sys/kernel/sched_ext/root/ops 2>/dev/null)" = pyland ] && return 0
        sleep 0.1
    done
    return 1
}
"""

GUEST = r"""#!/bin/bash
set -u
R=/results
cd /opt/scxctl
@WAIT_PYLAND@
stress() {
    stress-ng --cpu {cpus} --fork 1 --futex 1 --pipe 1 --sleep 2 --timeout {seconds}s \
        --metrics-brief --yaml "$R/$1.yaml" >"$R/$1.txt" 2>&1
    echo $? >"$R/$1.rc"
}
stress default
scxctl --log-format json run --policy {policy} --stats-interval 5 >"$R/pyland.log" 2>&1 &
pid=$!
wait_pyland
cat /sys/kernel/sched_ext/root/ops >"$R/ops.txt" 2>&1
stress pyland
cat /sys/kernel/sched_ext/state >"$R/state_after.txt"
kill -TERM $pid; wait $pid; echo $? >"$R/pyland.rc"
stress default2
"""

_METRIC = re.compile(r"-\s*stressor:\s*(\S+)(.*?)(?=\n\s*-\s*stressor:|\Z)", re.S)


def parse_yaml_metrics(text: str) -> dict[str, float]:
    """bogo-ops per second (real time) per stressor from stress-ng's --yaml output."""
    out: dict[str, float] = {}
    for name, body in _METRIC.findall(text):
        m = re.search(r"bogo-ops-per-second-real-time:\s*([0-9.eE+-]+)", body)
        if m:
            out[name] = float(m.group(1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--policy", default="deadline")
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="vm_stress_bench."))
    script = work / "bench.sh"
    text = GUEST.replace("@WAIT_PYLAND@", WAIT_PYLAND)
    script.write_text(text.replace("{cpus}", str(args.cpus)).replace("{seconds}", str(args.seconds))
                      .replace("{policy}", args.policy))
    n = 0

    def results_dir() -> Path:
        nonlocal n
        n += 1
        d = work / f"results{n}"
        d.mkdir()
        return d

    res = VM(results_dir).run("bash /tmp/bench.sh", timeout=6 * args.seconds + 600, cpus=args.cpus,
                              copy=[(str(script), "/tmp/bench.sh")])
    r = res.results
    if res.returncode != 0:
        print(f"guest run failed ({res.message}): {res.output[-2000:]}", file=sys.stderr)
        return 1
    runs = {}
    for name in ("default", "pyland", "default2"):
        y = r / f"{name}.yaml"
        runs[name] = parse_yaml_metrics(y.read_text()) if y.exists() else {}
        rc = (r / f"{name}.rc").read_text().strip() if (r / f"{name}.rc").exists() else "?"
        print(f"{name}: stress-ng exit {rc}")
    ops = (r / "ops.txt").read_text().strip() if (r / "ops.txt").exists() else "?"
    state = (r / "state_after.txt").read_text().strip() if (r / "state_after.txt").exists() else "?"
    print(f"pyland policy={args.policy}: root/ops during its run: {ops}; state after its stress run: {state}")
    log = (r / "pyland.log").read_text().splitlines()
    for ln in log:
        if ln.startswith(("pyland", "scxctl:")):
            print("  " + ln)
    stats = stats_lines("\n".join(log))
    if stats:
        keys = ("consumed", "nr_backlog", "nr_ring_full", "nr_direct", "nr_kthread", "nr_preempt_kicks",
                "busy_cpu_ns", "max_batch_wall_ns", "max_batch_cpu_ns")
        print("  last stats line: " + ", ".join(f"{k}={stats[-1].get(k)}" for k in keys))
    print(f"\nstress-ng {args.seconds} s, {args.cpus} vCPUs ({res.accel}), bogo-ops/s (real time), same boot")
    print(f"{'stressor':>10} {'default':>12} {'pyland':>12} {'default#2':>12} {'pyland/default':>15}")
    for s in sorted(set(runs["default"]) | set(runs["pyland"])):
        d, p, d2 = (runs[k].get(s, float("nan")) for k in ("default", "pyland", "default2"))
        base = (d + d2) / 2 if d2 == d2 else d
        print(f"{s:>10} {d:>12.1f} {p:>12.1f} {d2:>12.1f} {p / base if base else float('nan'):>15.2f}")
    print(f"(raw files: {r})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
