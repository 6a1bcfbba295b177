"""VM harness speed: warm `run -- true` (light init and systemd) and cold kernel + image preparation.

Usage: .venv/bin/python -m benchmarks.vm_boot [--runs N] [--no-systemd] [--cold [--no-warm]]
Targets: warm `run -- true` under 45 s with TCG (10 s with KVM); cold preparation under
4 minutes. `--cold` builds into an empty cache dir next to the real one and deletes it afterwards.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import time

from scxctl import log as logsetup
from tools.vm import config, image, kernel, runner

WARM_TARGET = {"tcg": 45.0, "kvm": 10.0}
COLD_TARGET = 240.0


def _warm(runs: int, systemd: bool) -> tuple[str, list[float], list[float]]:
    walls: list[float] = []
    boots: list[float] = []
    acc = "?"
    for _ in range(runs):
        out = runner.run(runner.RunSpec(command="true", systemd=systemd, timeout=120), sink=io.BytesIO())
        if out.returncode != 0:
            raise SystemExit(f"run -- true failed: exit {out.returncode}: {out.message}")
        acc = out.accel
        walls.append(out.wall_s - out.queued_s)  # not the wait for other engineers' guests
        boots.append(out.boot_s or float("nan"))
    return acc, walls, boots


def _cold() -> tuple[float, float]:
    scratch = config.cache_dir().parent / "vm-bench-cold"
    shutil.rmtree(scratch, ignore_errors=True)
    old = os.environ.get("SCXCTL_VM_CACHE")
    os.environ["SCXCTL_VM_CACHE"] = str(scratch)
    try:
        t0 = time.monotonic()
        kernel.prepare()
        t1 = time.monotonic()
        image.build()
        t2 = time.monotonic()
    finally:
        if old is None:
            os.environ.pop("SCXCTL_VM_CACHE", None)
        else:
            os.environ["SCXCTL_VM_CACHE"] = old
        shutil.rmtree(scratch, ignore_errors=True)
    return t1 - t0, t2 - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2, help="warm runs per init mode")
    ap.add_argument("--no-systemd", action="store_true", help="skip the systemd-mode runs")
    ap.add_argument("--cold", action="store_true", help="also time kernel + image preparation from empty")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm runs (with --cold: cold only)")
    args = ap.parse_args()
    logsetup.configure("console", 30)
    kernel.current() or kernel.prepare()
    image.current() or image.build()

    modes = [] if args.no_warm else [False] if args.no_systemd else [False, True]
    medians: dict[str, float] = {}
    for systemd in modes:
        name = "systemd" if systemd else "light"
        acc, walls, boots = _warm(args.runs, systemd)
        medians[name] = statistics.median(walls)
        target = WARM_TARGET[acc]
        print(
            f"warm {name:7s} [{acc}] run -- true: wall median {medians[name]:.1f} s "
            f"(runs {', '.join(f'{w:.1f}' for w in walls)}), boot-to-command median "
            f"{statistics.median(boots):.1f} s; target < {target:.0f} s -> ratio {medians[name] / target:.2f}"
        )
    if "systemd" in medians:
        print(f"systemd / light wall-time ratio: {medians['systemd'] / medians['light']:.2f}")
    if args.cold:
        k, i = _cold()
        total = k + i
        print(
            f"cold preparation: kernel {k:.1f} s + image {i:.1f} s = {total:.1f} s; "
            f"target < {COLD_TARGET:.0f} s -> ratio {total / COLD_TARGET:.2f}"
        )


if __name__ == "__main__":
    main()
