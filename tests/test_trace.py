"""`scxctl trace`: histogram slots and percentiles, the generated program, the command's errors and JSON."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from scxctl.cli import app
from scxctl.commands import trace as trace_cmd
from scxctl.errors import ExitCode, ScxctlError, UsageError
from scxctl.trace import deps, hist, wakeup
from scxctl.trace.hist import SLOTS, Histogram, slot_bounds, slot_of


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


runner = _runner()

# histogram maths


@pytest.mark.parametrize("ns", [0, 1, 3, 4, 5, 7, 8, 9, 1000, 1023, 1024, 1500, 2**40 + 12345, 2**64 - 1])
def test_every_delay_lies_in_its_slot(ns: int) -> None:
    s = slot_of(ns)
    low, high = slot_bounds(s)
    assert 0 <= s < SLOTS
    assert low <= ns < high


def test_slots_are_ordered_and_quarter_octaves() -> None:
    assert slot_bounds(slot_of(1024)) == (1024, 1280)
    assert slot_bounds(slot_of(1900)) == (1792, 2048)
    values = sorted(random.Random(1).randrange(1, 10**9) for _ in range(2000))
    slots = [slot_of(v) for v in values]
    assert slots == sorted(slots)


def test_percentiles_within_a_quarter_octave_of_the_exact_ones() -> None:
    rng = random.Random(7)
    values = [int(rng.lognormvariate(10, 1.2)) + 1 for _ in range(20000)]
    h = Histogram()
    for v in values:
        h.add(v)
    exact = sorted(values)
    for q in (0.5, 0.9, 0.99, 0.999):
        want = exact[int(q * len(exact)) - 1]
        got = h.percentile(q)
        assert got is not None
        assert abs(got - want) <= 0.25 * want, (q, got, want)
    assert h.percentile(0.999) <= h.max_ns == max(values)


def test_percentile_never_exceeds_the_kernels_max() -> None:
    h = Histogram()
    h.add(1100)  # slot [1024, 1280): an interpolated p99 would land above 1100
    assert h.percentile(0.99) == 1100


def test_empty_histogram_has_no_percentiles() -> None:
    s = Histogram().summary()
    assert s["count"] == 0
    assert s["p50_ns"] is None and s["max_ns"] is None


def test_log2_rows_sum_to_the_total_and_span_the_used_range() -> None:
    h = Histogram()
    for v in (1, 3, 700, 1500, 1600, 70_000):
        h.add(v)
    rows = h.log2_rows()
    assert sum(n for _, _, n in rows) == h.total == 6
    assert rows[0][:2] == (0, 2) and rows[-1][:2] == (65536, 131072)
    assert all(hi == 2 * lo for lo, hi, _ in rows if lo >= 2)


def _two_reads() -> tuple[Histogram, Histogram]:
    """Two cumulative reads of one group: 100 and 200 ns, then 300 and 5000 ns more."""
    a, b = Histogram(), Histogram()
    for v in (100, 200):
        a.add(v)
    for v in (100, 200, 300, 5000):
        b.add(v)
    return a, b


def test_interval_is_the_difference_of_cumulative_reads() -> None:
    a, b = _two_reads()
    d = wakeup.interval_hists([b], [a])[0]
    assert d.total == 2 and d.counts[slot_of(5000)] == 1


def test_mean_is_exact_from_the_kernels_sum_and_follows_intervals() -> None:
    a, b = _two_reads()
    assert b.mean_ns() == 5600 / 4  # the midpoint estimate would not land on it
    d = wakeup.interval_hists([b], [a])[0]
    assert (d.sum_ns, d.mean_ns()) == (5300, 2650)
    assert a.merged(b).sum_ns == 5900
    # without a sum (a kernel-side reader that kept none) the midpoints still give an estimate
    est = Histogram(b.counts, b.max_ns).mean_ns()
    assert est is not None and abs(est - 1400) < 0.25 * 1400


class FakePerCpu:
    """A bcc per-CPU array: a key reads as one value per CPU; `Leaf()` is all zeros."""

    def __init__(self, rows: list[list[int]]) -> None:
        self.rows = rows
        self.Leaf = lambda: [0] * len(rows[0])

    def __getitem__(self, key: Any) -> list[int]:
        return self.rows[key.value]

    def __setitem__(self, key: Any, value: list[int]) -> None:
        self.rows[key.value] = list(value)


def test_a_read_adds_the_cpus_up_and_resets_the_maxima() -> None:
    tracer = object.__new__(wakeup.WakeupTracer)  # no bcc: the kernel's tables faked
    tracer.selector, tracer._peak = wakeup.Selector(comms=("a", "b")), [0, 0]
    dist = [[0, 0] for _ in range(2 * SLOTS)]
    dist[slot_of(3000)] = [2, 1]  # group a, on both CPUs
    dist[SLOTS + slot_of(70_000)] = [0, 4]  # group b
    tracer._bpf = {"dist": FakePerCpu(dist), "maxv": FakePerCpu([[3100, 2900], [0, 70_500]]),
                   "sumv": FakePerCpu([[6000, 3000], [0, 280_000]])}
    a, b = tracer.read()
    assert (a.total, a.max_ns, a.sum_ns) == (3, 3100, 9000)
    assert (b.total, b.max_ns, b.sum_ns) == (4, 70_500, 280_000)
    assert tracer._bpf["maxv"].rows == [[0, 0], [0, 0]]  # the next interval's maximum starts over
    again = tracer.read()
    assert (again[0].total, again[0].max_ns) == (3, 0) and tracer.overall_max() == [3100, 70_500]


def test_text_rendering_scales_bars_to_the_fullest_row() -> None:
    h = Histogram()
    for _ in range(10):
        h.add(1500)
    h.add(100_000)
    lines = hist.render_rows(h, width=10)
    assert lines[0].endswith("|" + "*" * 10 + "|")
    assert "|*" in lines[-1] and lines[-1].count("*") == 1

# what the program reads of the kernel: members at the offsets of its BTF, never through headers
# (the program itself is tested in test_trace_program.py)


def test_the_layout_asks_only_for_what_the_filter_reads() -> None:
    assert wakeup.layout_members(wakeup.Selector()) == {"task_struct": ("pid",)}
    named = wakeup.layout_members(wakeup.Selector(tgid=1, prefix="x"))
    assert named == {"task_struct": ("pid", "tgid", "comm")}
    ref = wakeup.CgroupRef("/sys/fs/cgroup/a", 5, 1)
    cg = wakeup.layout_members(wakeup.Selector(cgroup=ref))
    assert cg == {"task_struct": ("pid", "cgroups"), **wakeup.CGROUP_MEMBERS}


def test_the_kernels_layout_comes_from_its_btf() -> None:
    every = wakeup.layout_members(
        wakeup.Selector(tgid=1, comms=("a",), cgroup=wakeup.CgroupRef("/sys/fs/cgroup/a", 5, 1)))
    layout = wakeup.kernel_layout(every)  # this machine's /sys/kernel/btf/vmlinux
    assert {s: set(m) for s, m in layout.offsets.items()} == {s: set(m) for s, m in every.items()}
    task = layout.offsets["task_struct"]
    assert task["tgid"] == task["pid"] + 4  # pid_t pid; pid_t tgid; side by side in every kernel


def test_a_kernel_without_btf_is_exit_7(tmp_path: Path) -> None:
    with pytest.raises(ScxctlError) as err:
        wakeup.kernel_layout({"task_struct": ("pid",)}, tmp_path / "vmlinux")
    assert err.value.code == ExitCode.BPF and "cannot read the kernel's BTF" in str(err.value)


def test_a_member_the_kernel_lacks_is_exit_7() -> None:
    with pytest.raises(ScxctlError) as err:
        wakeup.kernel_layout({"task_struct": ("pid", "no_such_member")})
    assert err.value.code == ExitCode.BPF and "task_struct.no_such_member" in str(err.value)


def test_a_cgroup_is_its_directorys_inode_and_depth(tmp_path: Path) -> None:
    # the program compares the woken task's ancestor at that depth with that id (the kernfs id)
    (tmp_path / "cgroup.controllers").write_text("cpu\n")
    d = tmp_path / "a" / "b"
    d.mkdir(parents=True)
    (d / "cgroup.procs").write_text("")
    ref = wakeup.resolve_cgroup("/a/b", root=tmp_path)
    assert (ref.level, ref.id) == (2, d.stat().st_ino)
    assert wakeup.resolve_cgroup(str(d), root=tmp_path) == ref
    layout = wakeup.Layout({"task_struct": {"pid": 8, "cgroups": 16}})
    prelude = wakeup.prelude(wakeup.Selector(cgroup=ref), layout).splitlines()
    assert f"#define FILTER_CGROUP_ID {ref.id}ULL" in prelude and "#define FILTER_CGROUP_LEVEL 2" in prelude


def test_unknown_cgroup_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu\n")
    with pytest.raises(UsageError):
        wakeup.resolve_cgroup("/nope", root=tmp_path)
    with pytest.raises(UsageError):
        wakeup.resolve_cgroup("../../etc", root=tmp_path)


def test_cflags_always_carry_the_ms_extensions() -> None:
    assert set(wakeup.CFLAGS) == {"-fms-extensions", "-Wno-microsoft-anon-tag"}

# the command


def _one_line(r: Any) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_missing_bcc_is_exit_7_with_the_apt_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "bcc_importable", lambda: False)
    r = runner.invoke(app, ["trace", "wakeup", "--comm", "x"])
    assert r.exit_code == ExitCode.BPF == 7
    assert f"apt install python3-bpfcc linux-headers-{deps.kernel_release()}" in _one_line(r)


def test_missing_headers_is_exit_7_with_the_apt_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(deps, "bcc_importable", lambda: True)
    monkeypatch.setenv("BCC_KERNEL_SOURCE", str(tmp_path / "none"))
    r = runner.invoke(app, ["trace", "wakeup"])
    assert r.exit_code == 7
    line = _one_line(r)
    assert line.endswith(f"apt install linux-headers-{deps.kernel_release()}")
    assert "Traceback" not in r.stdout + r.stderr


def test_bcc_compile_failure_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    class Boom:
        def __init__(self, **kw: Any) -> None:
            import os
            os.write(2, b"/x/fs.h:12:3: error: static assertion failed\n1 error generated.\n")
            raise Exception("Failed to compile BPF module <text>")

    import sys
    import types

    fake = types.ModuleType("bcc")
    fake.BPF = Boom  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bcc", fake)
    with pytest.raises(wakeup.ScxctlError) as exc:
        wakeup.compile_program("int x;")
    assert exc.value.code == 7
    assert "error: static assertion failed" in exc.value.message
    assert "\n" not in exc.value.message


@pytest.mark.parametrize("args", [["--pid", "1", "--comm", "x"], ["--duration", "0"], ["--pid", "-3"]])
def test_usage_errors(args: list[str]) -> None:
    r = runner.invoke(app, ["trace", "wakeup", *args])
    assert r.exit_code == 2, r.stderr


class FakeTracer:
    """Two reads' worth of known samples instead of a kernel."""

    def __init__(self, sel: wakeup.Selector) -> None:
        self.selector = sel
        self.compile_s = 0.5
        self.reads = 0
        self.closed = False

    def read(self) -> list[Histogram]:
        h = Histogram()
        for v in [2000] * (10 * self.reads) + [9000] * self.reads:
            h.add(v)
        h.max_ns = 9000 if self.reads else 0
        self.reads += 1
        return [h]

    def overall_max(self) -> list[int]:
        return [9000]

    def lost(self) -> int:
        return 2

    def close(self) -> None:
        self.closed = True


def test_json_document(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "require", lambda *a: None)
    monkeypatch.setattr(trace_cmd.os, "geteuid", lambda: 0)
    tracers: list[FakeTracer] = []
    monkeypatch.setattr(wakeup, "open_tracer", lambda sel: tracers.append(FakeTracer(sel)) or tracers[-1])
    r = runner.invoke(app, ["trace", "wakeup", "--comm", "pp", "--duration", "0.25", "--interval", "0.1",
                            "--json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "scxctl.trace.wakeup/1"
    assert doc["filter"]["comm"] == ["pp"]
    assert doc["compile_s"] == 0.5
    assert len(doc["intervals"]) == 2 and doc["intervals"][0]["count"] == 11
    total = doc["total"]
    assert total["count"] == 10 * (tracers[0].reads - 1) + tracers[0].reads - 1
    assert total["max_ns"] == 9000
    assert 1792 <= total["p50_ns"] <= 2048
    assert sum(b["count"] for b in total["histogram"]) == total["count"]
    assert doc["first_interval_s"] is not None and "estimated" in doc["estimate"]
    assert doc["lost"] == 2
    assert tracers[0].closed


def test_terminal_output_says_when_waits_were_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "require", lambda *a: None)
    monkeypatch.setattr(trace_cmd.os, "geteuid", lambda: 0)
    monkeypatch.setattr(wakeup, "open_tracer", FakeTracer)
    r = runner.invoke(app, ["trace", "wakeup", "--comm", "pp", "--duration", "0.1"])
    assert r.exit_code == 0, r.stderr
    assert "total over" in r.stdout
    assert "2 waits not counted: two tasks' stamps collided" in r.stdout


def test_not_root_is_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "require", lambda *a: None)
    monkeypatch.setattr(trace_cmd.os, "geteuid", lambda: 1000)
    r = runner.invoke(app, ["trace", "wakeup"])
    assert r.exit_code == 3
    assert "root" in _one_line(r)


def test_selector_describes_its_filter() -> None:
    assert wakeup.Selector().describe() == "every task"
    assert wakeup.Selector(tgid=7).describe() == "pid 7"
    ref = wakeup.CgroupRef("/sys/fs/cgroup/a", 5, 1)
    assert wakeup.Selector(comms=("x",), cgroup=ref).describe() == "comm x, cgroup /sys/fs/cgroup/a"
