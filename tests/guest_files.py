"""What the VM test modules share: the guest scenario prelude and reading what it wrote under /results."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

# Shell functions the guest scenario scripts share: state/ops of sched_ext, waiting for a state
# (enabled means pyland is the loaded ops), results under $R.
SCENARIO_PRELUDE = r"""#!/bin/bash
set -u
R=/results
SX=/sys/kernel/sched_ext
cd /opt/scxctl
state() { cat $SX/state 2>/dev/null; }
ops() { cat $SX/root/ops 2>/dev/null || echo none; }
wait_state() {  # wait_state WANT SECONDS
    for _ in $(seq 1 $(( $2 * 10 ))); do
        [ "$(state)" = "$1" ] && [ "$1" != enabled -o "$(ops)" = pyland ] && return 0
        sleep 0.1
    done
    return 1
}
# A pinned sleeper's waits: every wait past a 10 ms sleep over 50 ms as "END WAIT", END on
# CLOCK_REALTIME (a monitor's clock), then "END end"; until the file STOP exists, at most SECONDS.
# Usage: taskset -c CPU python3 /tmp/probe.py SECONDS STOP
cat >/tmp/probe.py <<'PY'
import os, sys, time
end, stop = time.monotonic() + float(sys.argv[1]), sys.argv[2]
while time.monotonic() < end and not os.path.exists(stop):
    t = time.monotonic(); time.sleep(0.01); w = time.monotonic() - t - 0.01
    if w > 0.05:
        print(f"{time.clock_gettime(time.CLOCK_REALTIME):.6f} {w:.4f}", flush=True)
print(f"{time.clock_gettime(time.CLOCK_REALTIME):.6f} end")
PY
"""


def read(results: Path, name: str) -> str:
    """The text of /results/NAME; a missing file fails the test with the name."""
    path = results / name
    assert path.exists(), f"the guest did not write {name}"
    return path.read_text()


def assert_watchdog_slept(stats: dict[str, Any], max_looks: int) -> None:
    """The policy watchdog looked only after the BPF heartbeat's alarms (a call past half its
    budget), a few looks each, and fewer than `max_looks` in all: looking every quarter budget,
    40 a second, it would have looked ten times that or more in the runs that call this."""
    looks, alarms = stats["watchdog_looks"], stats["nr_policy_alarms"]
    assert looks <= 5 * alarms and looks < max_looks, stats


def steady_rate(samples: Sequence[Sequence[float]], trim_s: float = 1.0) -> float:
    """CPU seconds per second from (seconds, usage_usec) samples of a cgroup's cpu.stat, less the
    first and last `trim_s`: what a CPU limit allows while its load runs. A cgroup's total also
    counts its load starting and ending under the limit, which takes as long as the host makes it."""
    first, last = samples[0][0] + trim_s, samples[-1][0] - trim_s
    kept = [(t, u) for t, u in samples if first <= t <= last]
    assert len(kept) >= 2 and kept[-1][0] - kept[0][0] >= 2.0, f"too few samples: {samples}"
    (t0, u0), (t1, u1) = kept[0], kept[-1]
    return (u1 - u0) / 1e6 / (t1 - t0)


DEB_ENV = "SCXCTL_DEB"  # a .deb to test instead of one built from the working tree


def installed_package(out: Path, extras: Sequence[str]) -> tuple[Path, Path]:
    """For a module fixture: (the .deb, a local apt repository of its Depends closure and the
    closures of `extras`) for a guest of the installed flavour. The .deb is $SCXCTL_DEB, else built
    now from the working tree into `out`."""
    from tools.vm import image, repo
    from tools.vm.codes import VMError

    if os.geteuid() != 0:
        pytest.skip("building the package and the guest's apt repository needs root (debootstrap, chroot)")
    if os.environ.get(DEB_ENV):
        deb = Path(os.environ[DEB_ENV])
    else:
        from tools.deb.build import build_working_tree

        deb = build_working_tree(out)
    if not deb.is_file():
        pytest.fail(f"${DEB_ENV} names no file: {deb}")
    try:
        image.current(image.INSTALLED) or image.build(flavour=image.INSTALLED)
        repository = repo.build(deb, extras=tuple(extras))
    except repo.Unresolvable as exc:  # a Depends trixie cannot satisfy: a finding, not a reason to skip
        pytest.fail(f"{deb.name}: {exc.message}")
    except VMError as exc:  # as the `vm` fixture: no image or no archive here is a reason to skip
        pytest.skip(f"no installed-flavour image or apt repository, and making them failed: {exc.message}")
    return deb, repository
