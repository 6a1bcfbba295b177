"""The loads schedulers are compared on, under the default scheduler, pyland and scx_simple, each load
in one guest boot.

Each load runs through `scxctl bench workload --compare default,pyland,scx_simple`: every round runs
it once under each scheduler, the order rotating, after a warm-up round that is not counted; the
table gives the default scheduler's median and each other scheduler's ratio to it with its 95%
interval. The loads: schbench (`-m 1 -t 2 -r 10`), hackbench (sockets and --pipe), cyclictest
(`-t 2 -i 1000`, SCHED_OTHER) beside two CPU hogs, stress-ng --fork, short-lived processes, and
schtest's adaptive_priority and fairness from the independent C implementation
(tests/native/schtest_ref.c). Then pyland alone under schbench with its stats every second: the
Python loop's CPU time and the records it handled per second.

One boot per load, not one for all: every run switches the scheduler, and QEMU 7.2's multi-threaded
TCG now and then executed a stale copy of kernel code being patched at a switch ("Oops: int3"); over
the ~60 switches of all the loads, two boots in a row ended that way. QEMU 10 (scripts/install.sh)
has not shown it, but a boot lost to it costs one load only. A load's comparison never spans boots.

scx_simple is the kernel's example scheduler, built from Debian's source (tools.vm.anchors);
schbench is built from ../shared/peer/schbench.c (or --schbench PATH). Runs as root (boots QEMU).

Usage: .venv/bin/python -m benchmarks.vm_sched_compare [--rounds 3] [--loads schbench,hackbench,...]
           [--pyland ARGS]... [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from scxctl.pyland.stats_log import stats_lines
from tools.vm import anchors
from tools.vm.api import VM
from tools.vm.config import cache_dir

PEER = Path(__file__).resolve().parents[2] / "shared" / "peer" / "schbench.c"
REF = "/opt/scxctl/tests/native/build/schtest-ref"
HOGS = "stress-ng --cpu 2 --timeout 120 >/dev/null 2>&1 & sleep 1"
SCHBENCH_METRICS = ["schbench.rps", "schbench.wakeup_p50_us", "schbench.wakeup_p90_us",
                    "schbench.wakeup_p99_us", "schbench.request_p99_us"]
# name: (command, extra `bench workload` options, the metrics the table shows)
LOADS: dict[str, tuple[str, list[str], list[str]]] = {
    "schbench": ("/tmp/schbench -m 1 -t 2 -r 10", [], SCHBENCH_METRICS),
    # Under TCG the workers' math runs about 6x slower than on hardware (a worker's burst between two
    # sleeps: 12-27 ms in the guest, 2.6-3.7 ms on the 2-core host), while adaptive_priority's
    # spins are wall-clock: a fifth of the math (-n 1) gives the guest's workers the bursts they have
    # on hardware.
    "schbench-n1": ("/tmp/schbench -m 1 -t 2 -r 10 -n 1", [], SCHBENCH_METRICS),
    "hackbench": ("hackbench -g 2 -l 200", [], ["hackbench.time_s"]),
    "hackbench-pipe": ("hackbench -g 2 -l 200 --pipe", [], ["hackbench.time_s"]),
    "cyclictest-hogs": (
        f"sh -c '{HOGS}; cyclictest -t 2 -i 1000 -D 5 -q -m -h 50000; kill $!'", [],
        [f"cyclictest.T{t}.{w}_us" for w in ("avg", "p99", "max") for t in (0, 1)]),
    "fork": ("stress-ng --fork 2 --timeout 5 --metrics", [], ["stress-ng.fork.bogo_ops_s"]),
    "short-lived": ("sh -c 'for i in $(seq 1000); do /bin/true; done'", [], ["wall_s"]),
    "adaptive": (f"{REF} adaptive 0 10",
                 ["--metric", 'adaptive_ratio="metric":([0-9.eE+-]+):lower',
                  "--metric", r'fast_p90_ns="fast":\{[^}]*"p90_ns":([0-9]+):lower',
                  "--metric", r'slow_p90_ns="slow":\{[^}]*"p90_ns":([0-9]+):lower'],
                 ["adaptive_ratio", "fast_p90_ns", "slow_p90_ns"]),
    "fairness": (f"{REF} fairness 6", ["--metric", 'fairness="metric":([0-9.eE+-]+):higher'], ["fairness"]),
}

GUEST_LOAD = r"""#!/bin/bash
set -u
R=/results
cd /opt/scxctl
load=@LOAD@
cmd=$(cat /tmp/loads/$load.cmd)
mapfile -t extra </tmp/loads/$load.opts
scxctl bench workload --compare "@COMPARE@" --rounds @ROUNDS@ --warmup 1 --quiet --json \
    --output "$R/$load.json" "${extra[@]}" -- sh -c "$cmd" >/dev/null 2>"$R/$load.err"
echo "$load $?" >>"$R/rc.txt"
"""
# pyland alone under schbench, its stats every second: the loop's CPU time and records per second
GUEST_LOOP = r"""#!/bin/bash
set -u
R=/results
cd /opt/scxctl
scxctl --log-format json run @PYLAND@ --stats-interval 1 >"$R/loop.log" 2>&1 &
sp=$!
for _ in $(seq 600); do [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && break; sleep 0.1; done
sleep 2
/tmp/schbench -m 1 -t 2 -r 10 >"$R/loop-schbench.txt" 2>&1
sleep 1
kill -INT $sp; wait $sp
exit 0
"""


def schbench_binary(given: Path | None) -> Path:
    """A static schbench: the one given, or built once from the peer source into the cache."""
    if given is not None:
        return given
    out = cache_dir() / "peer" / "schbench"
    if not PEER.is_file():
        # the source sits beside the checkout; a checkout elsewhere (a worktree) must say where
        if out.is_file():
            return out
        raise FileNotFoundError(f"schbench source {PEER} not found: pass --schbench PATH")
    if not out.is_file() or out.stat().st_mtime < PEER.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-O2", "-static", "-D_LARGEFILE_SOURCE", "-D_FILE_OFFSET_BITS=64",
                        "-o", str(out), str(PEER), "-lpthread", "-lm"], check=True, capture_output=True)
    return out


def loop_rates(log: str) -> dict[str, float] | None:
    """From pyland's stats lines under schbench: loop CPU ms per s and records (queued + reports) per s."""
    stats = stats_lines(log)
    if len(stats) < 4:
        return None
    # the lines 1 s apart while schbench ran (the first two: start-up)
    a, b = stats[1], stats[-2]
    ta, tb = datetime.fromisoformat(a["timestamp"]), datetime.fromisoformat(b["timestamp"])
    seconds = (tb - ta).total_seconds()
    if seconds <= 0:
        return None
    # busy_cpu_ns: the loop thread's batches only; process_cpu_ns: every thread, all the time
    process = (b["process_cpu_ns"] - a["process_cpu_ns"]) / 1e6 / seconds if "process_cpu_ns" in a else None
    return {"cpu_ms_per_s": (b["busy_cpu_ns"] - a["busy_cpu_ns"]) / 1e6 / seconds,
            "process_cpu_ms_per_s": process,
            "records_per_s": (b["consumed"] + b["observed"] - a["consumed"] - a["observed"]) / seconds,
            "updates_per_s": (b["updates"] - a["updates"]) / seconds}


def boot(script: str, copies: list[tuple[str, str]], tmp: Path, timeout: float) -> Path | None:
    """One guest boot running `script`; the directory of what it wrote, None when the boot failed."""
    path = tmp / "script.sh"
    path.write_text(script)
    res = VM(lambda: Path(tempfile.mkdtemp(prefix="sched-compare-"))).run(
        "bash /tmp/script.sh", timeout=timeout, cpus=2, mem="2G",
        copy=[*copies, (str(path), "/tmp/script.sh")], single_on_last_retry=False)
    if res.returncode != 0:
        print(f"guest run failed ({res.message}): {res.output[-2000:]}", file=sys.stderr)
        return None
    return res.results


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def table(results: dict[str, dict[str, Any]]) -> list[str]:
    rows = []
    for load, rep in results.items():
        labels = [s["name"] for s in rep["schedulers"]]
        for metric in LOADS[load][2]:
            res = rep["results"].get(metric)
            if res is None:
                rows.append(f"{load:<16} {metric:<26} (not measured)")
                continue
            base = res["schedulers"][labels[0]]["summary"]
            cells = [f"{fmt(base['median'])} ±{base['spread_pct'] / 2:.0f}%" if base else "-"]
            for lb in labels[1:]:
                e = res["schedulers"][lb]
                vs = e["vs_first"]
                cells.append("-" if vs is None else f"{vs['ratio']:.2f}x [{vs['ci_low']:.2f},"
                             f"{vs['ci_high']:.2f}] {e['verdict'] or ''}")
            rows.append(f"{load:<16} {metric:<26} " + " | ".join(f"{c:<28}" for c in cells))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--loads", default=",".join(LOADS))
    p.add_argument("--pyland", action="append", default=[],
                   help="a pyland variant: `scxctl run` options (repeatable; none: plain pyland)")
    p.add_argument("--no-simple", action="store_true", help="leave scx_simple out")
    p.add_argument("--schbench", type=Path)
    p.add_argument("--json", type=Path, help="write every load's report here")
    p.add_argument("--timeout", type=float, default=1800, help="per boot")
    args = p.parse_args(argv)
    loads = [ld for ld in args.loads.split(",") if ld]
    unknown = set(loads) - set(LOADS)
    if unknown:
        p.error(f"unknown loads {sorted(unknown)}; known: {', '.join(LOADS)}")
    try:  # before scx_simple's build, which can take minutes
        schbench = schbench_binary(args.schbench)
    except FileNotFoundError as exc:
        p.error(str(exc))
    pylands = [f"pyland {v}".strip() for v in (args.pyland or [""])]
    simple = None if args.no_simple else anchors.build()["scx_simple"]
    compare = ",".join(["default", *pylands, *([] if simple is None else ["/tmp/scx_simple"])])
    results: dict[str, dict[str, Any]] = {}
    loop = None
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "loads"
        d.mkdir()
        for name in loads:
            cmd, opts, _ = LOADS[name]
            (d / f"{name}.cmd").write_text(cmd)
            (d / f"{name}.opts").write_text("".join(o + "\n" for o in opts))
        copies = [(str(d), "/tmp/loads"), (str(schbench), "/tmp/schbench")]
        if simple is not None:
            copies.append((str(simple), "/tmp/scx_simple"))
        for name in loads:
            script = GUEST_LOAD.replace("@LOAD@", name).replace("@COMPARE@", compare) \
                .replace("@ROUNDS@", str(args.rounds))
            out = boot(script, copies, Path(tmp), args.timeout)
            f = out / f"{name}.json" if out else None
            if f is not None and f.is_file() and f.stat().st_size:
                results[name] = json.loads(f.read_text())
                print("\n".join(table({name: results[name]})), flush=True)
            else:
                err = out / f"{name}.err" if out else None
                why = err.read_text()[-500:] if err is not None and err.is_file() else ""
                print(f"{name}: no report: {why}", file=sys.stderr)
        out = boot(GUEST_LOOP.replace("@PYLAND@", shlex.join(args.pyland[0].split()) if args.pyland else ""),
                   copies, Path(tmp), args.timeout)
        log = out / "loop.log" if out else None
        loop = loop_rates(log.read_text()) if log is not None and log.is_file() else None
    labels = compare.split(",")
    print(f"rounds {args.rounds} (+1 warm-up), order rotating; columns: {' | '.join(labels)} "
          f"(ratios to {labels[0]}, 95% interval)")
    for row in table(results):
        print(row)
    if loop:
        process = loop["process_cpu_ms_per_s"]
        print(f"pyland's loop under schbench: {loop['cpu_ms_per_s']:.1f} ms CPU/s in batches, "
              + (f"{process:.1f} ms CPU/s for the whole process, " if process is not None else "")
              + f"{loop['records_per_s']:.0f} records/s, {loop['updates_per_s']:.1f} updates/s")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "loop": loop, "compare": labels}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
