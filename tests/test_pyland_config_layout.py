"""struct pyland_config as written in bpf/pyland.h against the Python side that fills it.

Host-only: the header is read as text, so a field reordered, renamed or added in C fails here
without a BPF toolchain (test_pyland_records.py checks sizes and offsets in the built object's BTF).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from cheader import struct_members

from scxctl.pyland import scheduler
from scxctl.pyland.bpf_config import CONFIG_FIELDS, PylandConfig
from scxctl.pyland.records import CONFIG


def test_field_names_and_order_match_c() -> None:
    assert tuple(struct_members("pyland_config")) == CONFIG_FIELDS


def test_values_can_only_be_given_by_name() -> None:
    with pytest.raises(TypeError):
        PylandConfig(*range(len(CONFIG_FIELDS)))  # type: ignore[misc]


class _Map:
    def set_autocreate(self, on: bool) -> None:
        pass

    def set_max_entries(self, n: int) -> None:
        pass


class _Obj:
    rodata: bytes = b""

    @classmethod
    def open(cls, path: Path, sysroot: Any = None) -> _Obj:
        return cls()

    def set_rodata_bytes(self, off: int, data: bytes) -> None:
        assert off == 0
        _Obj.rodata = data

    def map(self, name: str) -> _Map:
        return _Map()

    def close(self) -> None:
        pass


def test_each_run_option_reaches_the_field_of_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `scxctl run` loads, decoded by the C names, with values a swap would show (the fields
    that share --slice-us or --slice-min-us are told apart by turning direct wake-ups off)."""
    monkeypatch.setattr(scheduler, "BpfObject", _Obj)
    opts = scheduler.RunOptions(slice_us=30_000, slice_min_us=2_000, builtin_idle=False, max_backlog=77,
                                starve_ms=333, direct_wake=True, policy_budget_ms=44, new_direct=True,
                                cpu_max_hold_ms=555, report_ms=7)
    scheduler.open_configured(Path("pyland.bpf.o"), opts)
    got = dict(zip(CONFIG_FIELDS, CONFIG.unpack(_Obj.rodata), strict=True))
    assert got == {
        "slice_ns": 2_000_000,
        "usersched_tgid": os.getpid(),
        "builtin_idle": 0,
        "timer_ns": scheduler.TIMER_NS,
        "max_backlog": 77,
        "starve_ns": 333_000_000,
        "direct_wake_ns": 2_000_000,
        "max_slice_ns": 30_000_000,
        "stall_ns": 44_000_000,
        "new_direct": 1,
        "bw_max_hold_ns": 555_000_000,
        "steer": 1,
        "lag_ns": 30_000_000,  # the sleep credit is one budget, as --slice-us says
        "report_ns": 7_000_000,
        "preempt_gap_ns": 500_000,  # a quarter of the BPF slice
    }
    opts = scheduler.RunOptions(direct_wake=False, new_direct=False, wake_preempt=False)
    scheduler.open_configured(Path("pyland.bpf.o"), opts, steer=False)
    got = dict(zip(CONFIG_FIELDS, CONFIG.unpack(_Obj.rodata), strict=True))
    assert (got["direct_wake_ns"], got["new_direct"], got["builtin_idle"]) == (0, 0, 1)
    assert (got["steer"], got["preempt_gap_ns"]) == (0, 0)
