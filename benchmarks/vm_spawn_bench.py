"""Process creation under pyland vs the default scheduler, side by side in ONE guest boot.

Two loads where every task is new, the case the BPF core's fast paths see least of:
- `stress-ng --fork N`: bogo-ops/s (forks that ran and were reaped);
- SHORT short-lived processes (`/bin/true`, spawned one after another by a shell): processes/s.

Order in the guest: default -> pyland -> default again, REPEAT times; the ratio pyland / mean of
the default runs around it is the result (TCG makes absolute numbers meaningless; the drift between
the two default runs shows the guest's own noise). A warm-up round (one default and one pyland run
of each variant) goes first and is printed but not counted: a boot's first fork run is not like
its later ones (the first default run was the fastest of its boot in 7 boots of 11, by up to 10%,
and the first ratio of a boot was its lowest in 8 boots of 12). With several variants, they take
turns going first in a round (see rounds()).
Runs as root on the host (boots QEMU).

Usage: .venv/bin/python -m benchmarks.vm_spawn_bench [--seconds 10] [--short 2000] [--repeat 2] [--warmup 1]
           [--variant= --variant=--no-new-direct]   (`scxctl run` options; each one a pyland run)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.vm_stress_bench import WAIT_PYLAND, parse_yaml_metrics
from tools.vm.api import VM

GUEST = r"""#!/bin/bash
set -u
R=/results
cd /opt/scxctl
@WAIT_PYLAND@
measure() {  # measure NAME
    stress-ng --fork {forks} --timeout {seconds}s --metrics-brief --yaml "$R/$1.fork.yaml" >/dev/null 2>&1
    t0=$(date +%s.%N)
    for _ in $(seq {short}); do /bin/true; done
    t1=$(date +%s.%N)
    echo "$t0 $t1" >"$R/$1.short"
}
pyland() {  # pyland NAME ARGS...
    local name=$1; shift
    scxctl --log-format json run --stats-interval 5 "$@" >"$R/$name.log" 2>&1 &
    pid=$!
    wait_pyland
    measure $name
    cat /sys/kernel/sched_ext/state >"$R/$name.state"
    kill -TERM $pid; wait $pid; echo $? >"$R/$name.rc"
}
@ROUNDS@
"""


def rates(r: Path, name: str, short: int) -> tuple[float, float]:
    """(fork bogo-ops/s, short-lived processes/s) of one measurement."""
    fork = parse_yaml_metrics((r / f"{name}.fork.yaml").read_text()).get("fork", float("nan"))
    t0, t1 = map(float, (r / f"{name}.short").read_text().split())
    return fork, short / (t1 - t0)


def rounds(variants: list[str], repeat: int, warmup: int) -> str:
    """The guest's measurements in order: a default run, then each variant, per round.

    The variants take turns going first (reversed every other round): the pyland run right after a
    default run was the slower one of a round in 9 pairs of 11, whichever variant it was."""
    lines = []
    for prefix, count in (("warmup-", warmup), ("", repeat)):
        for i in range(1, count + 1):
            order = list(enumerate(variants))
            if i % 2 == 0:
                order.reverse()
            lines.append(f"measure {prefix}default.{i}")
            lines += [f"pyland {prefix}pyland{v}.{i} {opts}" for v, opts in order]
    lines.append(f"measure default.{repeat + 1}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--forks", type=int, default=2, help="stress-ng --fork workers")
    ap.add_argument("--short", type=int, default=2000, help="short-lived processes per measurement")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1, help="uncounted rounds before the measured ones")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--variant", action="append", default=None,
                    help="`scxctl run` options of one pyland run (repeatable; default: one run, no options)")
    args = ap.parse_args(argv)
    variants: list[str] = args.variant or [""]
    work = Path(tempfile.mkdtemp(prefix="vm_spawn_bench."))
    script = work / "bench.sh"
    text = GUEST.replace("@ROUNDS@", rounds(variants, args.repeat, args.warmup))
    text = text.replace("@WAIT_PYLAND@", WAIT_PYLAND)
    for key in ("seconds", "forks", "short"):
        text = text.replace("{" + key + "}", str(getattr(args, key)))
    script.write_text(text)
    results = work / "results"
    results.mkdir()
    timeout = (args.repeat + args.warmup) * (len(variants) + 1) * (2 * args.seconds + 300) + 600
    res = VM(lambda: results).run("bash /tmp/bench.sh", timeout=timeout, cpus=args.cpus,
                                  copy=[(str(script), "/tmp/bench.sh")])
    if res.returncode != 0:
        print(f"guest run failed ({res.message}): {res.output[-2000:]}", file=sys.stderr)
        return 1
    r = res.results
    print(f"{args.cpus} vCPUs ({res.accel}); stress-ng --fork {args.forks} {args.seconds} s; {args.short} "
          f"short-lived processes; default and each pyland variant in turn, one boot")
    for i in range(1, args.warmup + 1):
        d = rates(r, f"warmup-default.{i}", args.short)
        warm_p = [rates(r, f"warmup-pyland{v}.{i}", args.short) for v in range(len(variants))]
        forks = ", ".join(f"{p[0]:.1f}" for p in warm_p)
        shorts = ", ".join(f"{p[1]:.1f}" for p in warm_p)
        print(f"warm-up {i} (not counted): default fork {d[0]:.1f}, short/s {d[1]:.1f}; "
              f"pyland fork {forks}, short/s {shorts}")
    print(f"{'variant':>22} {'run':>4} {'fork default':>13} {'fork pyland':>12} {'ratio':>6} "
          f"{'short/s default':>16} {'short/s pyland':>15} {'ratio':>6}")
    for v, opts in enumerate(variants):
        fork_ratios, short_ratios = [], []
        for i in range(1, args.repeat + 1):
            d0, d1 = rates(r, f"default.{i}", args.short), rates(r, f"default.{i + 1}", args.short)
            p = rates(r, f"pyland{v}.{i}", args.short)
            fork_base, short_base = (d0[0] + d1[0]) / 2, (d0[1] + d1[1]) / 2
            fork_ratios.append(p[0] / fork_base)
            short_ratios.append(p[1] / short_base)
            state = (r / f"pyland{v}.{i}.state").read_text().strip()
            rc = (r / f"pyland{v}.{i}.rc").read_text().strip()
            print(f"{opts or '(defaults)':>22} {i:>4} {fork_base:>13.1f} {p[0]:>12.1f} "
                  f"{fork_ratios[-1]:>6.2f} {short_base:>16.1f} {p[1]:>15.1f} {short_ratios[-1]:>6.2f}"
                  f"   (state {state}, exit {rc})")
        print(f"{opts or '(defaults)':>22} median ratio pyland/default: fork "
              f"{statistics.median(fork_ratios):.2f}, short-lived {statistics.median(short_ratios):.2f}")
    print(f"(raw files: {r})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
