"""pyland's cpu.max snapshot for `scxctl status`: what it writes from the BPF map, when, and for whom.

The map is stood in for by its raw entries (the layout is checked against the C header by
test_pyland_records.py); the cgroup tree is real directories under a fake root, so the ids are
real inode numbers. The guest tests read the same snapshot from a real pyland.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fakeroot import FakeRoot

from scxctl.commands.lifecycle import render_status
from scxctl.pyland import cgroup_report
from scxctl.pyland.records import CGROUP_BW, CGROUP_BW_FIELDS


class _Map:
    def __init__(self, entries: dict[int, dict[str, int]]) -> None:
        self.entries = entries

    def items(self, key_size: int, value_size: int) -> list[tuple[bytes, bytes]]:
        assert (key_size, value_size) == (8, CGROUP_BW.size)
        return [(k.to_bytes(8, "little"), CGROUP_BW.pack(*(v.get(f, 0) for f in CGROUP_BW_FIELDS)))
                for k, v in self.entries.items()]


class _Obj:
    def __init__(self, m: _Map) -> None:
        self._m = m

    def map(self, name: str) -> _Map:
        assert name == "cgroup_bw"
        return self._m


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeRoot, dict[str, int]]:
    fake = FakeRoot(tmp_path / "root").sched_ext_machine(state="enabled", ops="pyland")
    ids = {}
    for rel in ("a", "p", "p/c"):
        d = fake.mkdir(f"/sys/fs/cgroup/{rel}")
        ids["/" + rel] = os.stat(d).st_ino
    monkeypatch.setenv("SCXCTL_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    return fake, ids


def _bw(**kw: int) -> dict[str, int]:
    return {"period_ns": 100_000_000, "quota_ns": 20_000_000, **kw}


def test_snapshot_names_each_cgroup_and_converts_units(tree: tuple[FakeRoot, dict[str, int]]) -> None:
    fake, ids = tree
    m = _Map({ids["/a"]: _bw(throttled_at=5, nr_throttled=7, throttled_ns=450_000_000, usage_ns=2_100_000_000,
                              nr_held=30),
              ids["/p/c"]: _bw(quota_ns=50_000_000)})
    report = cgroup_report.CgroupReport(_Obj(m), fake.sysroot)  # type: ignore[arg-type]
    doc = report.snapshot({"nr_bw_held": 30, "nr_bw_released": 29, "nr_bw_preempted": 4, "nr_bw_overdue": 0})
    rows = {r["path"]: r for r in doc["cgroups"]}
    assert set(rows) == {"/a", "/p/c"}
    a = rows["/a"]
    assert (a["quota_us"], a["period_us"], a["throttled"], a["nr_throttled"]) == (20000, 100000, True, 7)
    assert (a["throttled_ms"], a["usage_ms"], a["nr_held"]) == (450, 2100, 30)
    assert rows["/p/c"]["throttled"] is False and rows["/p/c"]["quota_us"] == 50000
    assert doc["pid"] == os.getpid() and (doc["held"], doc["released"], doc["preempted"]) == (30, 29, 4)


def test_an_unknown_id_has_no_path_rather_than_a_wrong_one(tree: tuple[FakeRoot, dict[str, int]]) -> None:
    fake, _ = tree
    report = cgroup_report.CgroupReport(_Obj(_Map({123456789: _bw()})), fake.sysroot)  # type: ignore[arg-type]
    assert report.snapshot({})["cgroups"][0]["path"] is None


def test_written_while_limits_exist_once_more_when_they_go_and_removed_at_stop(
        tree: tuple[FakeRoot, dict[str, int]]) -> None:
    fake, ids = tree
    m = _Map({})
    report = cgroup_report.CgroupReport(_Obj(m), fake.sysroot)  # type: ignore[arg-type]
    path = cgroup_report.snapshot_path()
    report.maybe_write(0.0, lambda: {"nr_bw_cgroups": 0})
    assert not path.exists()  # nothing limited: nothing written
    m.entries = {ids["/a"]: _bw()}
    report.maybe_write(1.0, lambda: {"nr_bw_cgroups": 1})
    assert cgroup_report.read_snapshot(os.getpid())["cgroups"][0]["path"] == "/a"  # type: ignore[index]
    m.entries = {}
    report.maybe_write(1.5, lambda: {"nr_bw_cgroups": 0})  # within the second: not yet
    assert cgroup_report.read_snapshot()["cgroups"]  # type: ignore[index]
    report.maybe_write(2.0, lambda: {"nr_bw_cgroups": 0})
    assert cgroup_report.read_snapshot()["cgroups"] == []  # type: ignore[index]
    report.maybe_write(3.0, lambda: {"nr_bw_cgroups": 0})
    m.entries = {ids["/a"]: _bw()}
    report.maybe_write(4.0, lambda: {"nr_bw_cgroups": 1})
    report.close()
    assert not path.exists()


def test_the_daemon_reads_only_its_childs_snapshot(tree: tuple[FakeRoot, dict[str, int]]) -> None:
    path = cgroup_report.snapshot_path()
    path.write_text('{"pid": 4242, "cgroups": []}\n')
    assert cgroup_report.read_snapshot(4242) == {"pid": 4242, "cgroups": []}
    assert cgroup_report.read_snapshot(4243) is None
    cgroup_report.remove_snapshot(4243)  # not its own: left alone
    assert path.exists()
    path.write_text("not json")
    assert cgroup_report.read_snapshot(4242) is None


def test_status_shows_limited_and_throttled_cgroups(capsys: pytest.CaptureFixture[str]) -> None:
    st: dict[str, Any] = {
        "summary": "pyland (auto) running, pid 7, restarts 0, re-attaches 0",
        "kernel": {"state": "enabled", "ops": "pyland", "owner": "scxctl"},
        "desired": {"enabled": True, "scheduler": "pyland", "mode": "auto", "policy": None,
                    "updated_at": None},
        "supervisor": {"phase": "running", "pid": 7, "restart_count": 0, "reattach_count": 0,
                       "failures_in_window": 0, "last_exit": None, "gave_up": None},
        "daemon": {},
        "cgroups": {"pid": 7, "held": 12, "preempted": 3, "cgroups": [
            {"id": 1, "path": "/system.slice/quota.service", "quota_us": 20000, "period_us": 100000,
             "throttled": True, "nr_throttled": 9, "throttled_ms": 700, "usage_ms": 1900, "nr_held": 12},
        ]},
    }
    render_status(st)
    out = capsys.readouterr().out
    assert "cpu.max:    1 cgroup(s) limited by pyland, 1 throttled now; 12 task hold(s), 3 tick stop(s)" \
        in out
    assert "/system.slice/quota.service: 20000/100000 us, THROTTLED, throttled 9 period(s) (700 ms)" in out
