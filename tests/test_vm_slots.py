"""tools.vm.slots: guests share the host's cores, a core per vCPU thread, and nobody starves."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tools.vm import slots


def test_a_guest_holds_a_core_per_vcpu_thread() -> None:
    assert slots.needed(cpus=2, tcg_single=True, total=2) == 1
    assert slots.needed(cpus=2, tcg_single=False, total=2) == 2
    assert slots.needed(cpus=4, tcg_single=False, total=2) == 2
    assert slots.needed(cpus=1, tcg_single=False, total=2) == 1


def test_two_single_threaded_guests_run_side_by_side(tmp_path: Path) -> None:
    with slots.held(tmp_path, 1, total=2) as first, slots.held(tmp_path, 1, total=2) as second:
        assert (first, second) == (False, False)


def _hold(tmp_path: Path, count: int, log: list[str], name: str, seconds: float) -> threading.Thread:
    def body() -> None:
        with slots.held(tmp_path, count, total=2):
            log.append(f"{name} in")
            time.sleep(seconds)
            log.append(f"{name} out")

    t = threading.Thread(target=body)
    t.start()
    return t


def test_a_guest_wanting_every_core_waits_and_is_not_overtaken(tmp_path: Path) -> None:
    log: list[str] = []
    single = _hold(tmp_path, 1, log, "single", 0.6)
    time.sleep(0.2)
    whole = _hold(tmp_path, 2, log, "whole", 0.3)  # waits for the single one's core, holding the gate
    time.sleep(0.2)
    late = _hold(tmp_path, 1, log, "late", 0.1)  # a core is free, but "whole" is first in line
    for t in (single, whole, late):
        t.join(timeout=10)
    assert log == ["single in", "single out", "whole in", "whole out", "late in", "late out"], log


def test_waiting_is_reported(tmp_path: Path) -> None:
    log: list[str] = []
    holder = _hold(tmp_path, 2, log, "holder", 0.4)
    time.sleep(0.1)
    t0 = time.monotonic()
    with slots.held(tmp_path, 1, total=2) as waited:
        assert waited and time.monotonic() - t0 >= 0.2
    holder.join(timeout=10)
