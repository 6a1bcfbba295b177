"""`scxctl status` round-trip wall time, measured side by side with `python3 -c pass` in one run.

Starts a private daemon (temporary config/state/log/runtime dirs, a fake sched_ext sysfs tree, so it
runs on any machine and touches nothing real), then alternates the measured commands so machine load
hits all of them alike. Prints medians, p90 and the ratio; the target is a status round trip under
200 ms wall. `--real` measures against the daemon already running on this machine instead.

The package is byte-compiled first, as an installed scxctl is (pip and Debian's py3compile do it at
install time): a checkout run with PYTHONDONTWRITEBYTECODE=1 would otherwise recompile every scxctl
module on each start. `--no-compile` measures without that step.

    .venv/bin/python benchmarks/status_bench.py [-n 20] [--real] [--no-compile]
"""

from __future__ import annotations

import argparse
import compileall
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MS = 200.0
PACKAGE = Path(__file__).resolve().parent.parent / "scxctl"


def _timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t0) * 1000


def _private_daemon(tmp: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    scx = tmp / "sysroot/sys/kernel/sched_ext"
    scx.mkdir(parents=True)
    (scx / "state").write_text("disabled\n")
    env = {
        **os.environ,
        "SCXCTL_SYSROOT": str(tmp / "sysroot"),
        "SCXCTL_CONFIG": str(tmp / "config.toml"),
        "SCXCTL_STATE_DIR": str(tmp / "state"),
        "SCXCTL_LOG_DIR": str(tmp / "log"),
        "SCXCTL_RUNTIME_DIR": str(tmp / "run"),
    }
    env.pop("NOTIFY_SOCKET", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "scxctl", "daemon"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not (tmp / "run/control.sock").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the private daemon did not start")
        time.sleep(0.05)
    return proc, env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20, help="rounds (each runs every command once)")
    ap.add_argument("--real", action="store_true", help="use the daemon already running on this machine")
    ap.add_argument("--no-compile", action="store_true", help="do not byte-compile the package first")
    args = ap.parse_args()
    bytecode = "as found" if args.no_compile else "byte-compiled first"
    if not args.no_compile:
        compileall.compile_dir(PACKAGE, quiet=1)
    with tempfile.TemporaryDirectory(prefix="scxctl-bench-") as tmpdir:
        proc, env = (None, dict(os.environ)) if args.real else _private_daemon(Path(tmpdir))
        try:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            os.environ.update(env)
            from scxctl.daemon import client

            commands = {
                "python3 -c pass": [sys.executable, "-c", "pass"],
                "scxctl status": [sys.executable, "-m", "scxctl", "status"],
                "scxctl status --json": [sys.executable, "-m", "scxctl", "status", "--json"],
            }
            samples: dict[str, list[float]] = {
                name: [] for name in [*commands, "socket round trip (in-process)"]
            }
            for argv in commands.values():  # warm the page cache once
                _timed(argv, env)
            for _ in range(args.n):
                for name, argv in commands.items():
                    samples[name].append(_timed(argv, env))
                t0 = time.perf_counter()
                client.call("status")
                samples["socket round trip (in-process)"].append((time.perf_counter() - t0) * 1000)
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    base = statistics.median(samples["python3 -c pass"])
    print(f"{'command':34} {'median ms':>10} {'p90 ms':>8} {'x python3 -c pass':>18}")
    for name, vals in samples.items():
        vals.sort()
        med = statistics.median(vals)
        p90 = vals[min(len(vals) - 1, int(len(vals) * 0.9))]
        print(f"{name:34} {med:10.1f} {p90:8.1f} {med / base:18.2f}")
    status = statistics.median(samples["scxctl status"])
    verdict = "meets" if status < TARGET_MS else "misses"
    print(
        f"scxctl status median {status:.1f} ms {verdict} the {TARGET_MS:.0f} ms target "
        f"({args.n} rounds, load average {os.getloadavg()[0]:.2f}, bytecode {bytecode})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
