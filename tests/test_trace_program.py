"""`scxctl trace`'s BPF program (scxctl/trace/wakeup.bpf.c and the prelude of #defines before it).

Its behaviour is checked on the host without bcc or BPF: the text bcc would compile is compiled by
the host's C compiler against a stand-in for the bcc API it uses (maps are arrays on one CPU, a
kernel read is a memcpy), and the kernel's events become calls on fake tasks laid out as a Layout
says. Where bcc, the running kernel's headers and root are all present, bcc compiles, loads and
attaches the real thing for several selectors; elsewhere those tests skip.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

from scxctl.trace import deps, wakeup
from scxctl.trace.hist import SLOTS, Histogram, slot_of

ROOT = Path(__file__).resolve().parent.parent

# the offsets the fake tasks and cgroups are laid out at (any will do: each run gets its own)
LAYOUT = wakeup.Layout({
    "task_struct": {"pid": 1000, "tgid": 1004, "comm": 1500, "cgroups": 2000},
    "css_set": {"dfl_cgrp": 112},
    "cgroup": {"kn": 256, "level": 216, "ancestors": 2224},
    "kernfs_node": {"id": 96},
})
OBJECT_SIZE = 4096  # every fake kernel object: room for the members above and 200 ancestors

# The bcc API wakeup.bpf.c uses, for the host's compiler: types, helpers and tables of one CPU
BCC_STAND_IN = r"""
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint32_t u32;
typedef int32_t s32;
typedef uint64_t u64;
#undef __always_inline
#define __always_inline inline __attribute__((always_inline))
#define UNUSED __attribute__((unused))

struct bpf_raw_tracepoint_args { u64 args[4]; };

u64 fake_now;
static UNUSED u64 bpf_ktime_get_ns(void) { return fake_now; }
static UNUSED long bpf_probe_read_kernel(void *dst, u32 size, const void *src)
{
	memcpy(dst, src, size);
	return 0;
}

static UNUSED void add_one(void *v, size_t size)
{
	if (size == sizeof(u64))
		++*(u64 *)v;
	else if (size == sizeof(u32))
		++*(u32 *)v;
}

/* NAME_data (and NAME_size) are what the tests read; NAME.lookup/.increment what the program calls */
#define BPF_ARRAY(name, type, n)							\
	type name##_data[n];								\
	size_t name##_size = sizeof(name##_data);					\
	static UNUSED type *name##_lookup(u32 *k) { return *k < (u32)(n) ? &name##_data[*k] : NULL; } \
	static UNUSED void name##_increment(u32 k)					\
	{ if (k < (u32)(n)) add_one(&name##_data[k], sizeof(type)); }			\
	static UNUSED struct { type *(*lookup)(u32 *); void (*increment)(u32); } name =	\
		{ name##_lookup, name##_increment }
#define BPF_PERCPU_ARRAY BPF_ARRAY
#define RAW_TRACEPOINT_PROBE(event) int raw_tracepoint__##event(struct bpf_raw_tracepoint_args *ctx)
"""
MAPS = ("start", "filter_gen", "lost", "idle_task", "dist", "maxv", "sumv")
_built: dict[str, Path] = {}


def layout_for(sel: wakeup.Selector) -> wakeup.Layout:
    """LAYOUT cut to what kernel_layout would give for `sel`: the members its filter reads."""
    return wakeup.Layout({s: {m: LAYOUT.at(s, m) for m in members}
                          for s, members in wakeup.layout_members(sel).items()})


def host_cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc): scripts/install.sh installs gcc")
    return cc


def build_native(text: str, out_dir: Path) -> Path:
    """`text` (what bcc would compile) as a host shared library, warnings as errors."""
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    if key in _built:
        return _built[key]
    src = out_dir / f"wakeup-{key}.c"
    src.write_text(BCC_STAND_IN + text)
    lib = out_dir / f"wakeup-{key}.so"
    # unused parameters are the kernel's style (a filter's inputs where it does not filter)
    flags = ["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror", "-shared", "-fPIC",
             "-Wl,-Bsymbolic"]
    proc = subprocess.run([host_cc(), *flags, "-o", str(lib), str(src)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    _built[key] = lib
    return lib


class FakeKernel:
    """The program for a selector, run natively: events are calls, tasks and cgroups are buffers."""

    def __init__(self, sel: wakeup.Selector, out_dir: Path) -> None:
        self.sel = sel
        self.lib = ctypes.CDLL(str(build_native(wakeup.program(sel, layout_for(sel)), out_dir)))
        for name in MAPS:  # a fresh kernel: every table zero
            size = ctypes.c_size_t.in_dll(self.lib, f"{name}_size").value
            ctypes.memset(ctypes.addressof(ctypes.c_char.in_dll(self.lib, f"{name}_data")), 0, size)
        self._objects: list[Any] = []
        self.idle = self.task(pid=0)

    # the kernel's objects

    def _object(self) -> tuple[Any, int]:
        buf = ctypes.create_string_buffer(OBJECT_SIZE)
        self._objects.append(buf)
        return buf, ctypes.addressof(buf)

    def _put(self, addr: int, struct: str, member: str, ctype: Any, value: Any, extra: int = 0) -> None:
        ctype.from_address(addr + LAYOUT.at(struct, member) + extra).value = value

    def cgroup(self, cg_id: int, parent: int | None = None) -> int:
        """A cgroup v2 below `parent` (None: the root), with its kernfs id and ancestors[]."""
        _, addr = self._object()
        _, kn = self._object()
        self._put(kn, "kernfs_node", "id", ctypes.c_uint64, cg_id)
        self._put(addr, "cgroup", "kn", ctypes.c_uint64, kn)
        chain = [*self._ancestors(parent), addr]
        self._put(addr, "cgroup", "level", ctypes.c_int, len(chain) - 1)
        for i, a in enumerate(chain):
            self._put(addr, "cgroup", "ancestors", ctypes.c_uint64, a, extra=8 * i)
        return addr

    def _ancestors(self, cg: int | None) -> list[int]:
        if cg is None:
            return []
        level = ctypes.c_int.from_address(cg + LAYOUT.at("cgroup", "level")).value
        base = cg + LAYOUT.at("cgroup", "ancestors")
        return [ctypes.c_uint64.from_address(base + 8 * i).value for i in range(level + 1)]

    def task(self, pid: int = 100, tgid: int | None = None, comm: str = "task",
             cgroup: int | None = None) -> int:
        """A task (tgid: its pid unless given) in `cgroup` (None: a root cgroup of its own)."""
        _, addr = self._object()
        self._put(addr, "task_struct", "pid", ctypes.c_uint32, pid)
        self._put(addr, "task_struct", "tgid", ctypes.c_uint32, pid if tgid is None else tgid)
        self.rename(addr, comm, event=False)
        _, css_set = self._object()
        self._put(addr, "task_struct", "cgroups", ctypes.c_uint64, css_set)
        self._put(css_set, "css_set", "dfl_cgrp", ctypes.c_uint64, cgroup or self.cgroup(1))
        return addr

    def rename(self, task: int, comm: str, event: bool = True) -> None:
        """The kernel's comm: 15 bytes at most and a terminator; the event fires before the write."""
        if event:
            self.fire("task_rename")
        raw = comm.encode()[:15]
        ctypes.memmove(task + LAYOUT.at("task_struct", "comm"), raw + b"\0" * (16 - len(raw)), 16)

    def move(self, task: int, cgroup: int) -> None:
        """The task's cgroup v2 changes, then the attach event fires."""
        css_set = ctypes.c_uint64.from_address(task + LAYOUT.at("task_struct", "cgroups")).value
        self._put(css_set, "css_set", "dfl_cgrp", ctypes.c_uint64, cgroup)
        self.fire("cgroup_attach_task")

    # events

    def fire(self, tp: str, *args: int) -> int:
        """The tracepoint `tp` fires: its probe runs, where the program has one."""
        fn = getattr(self.lib, f"raw_tracepoint__{tp}", None)
        return 0 if fn is None else int(fn((ctypes.c_uint64 * 4)(*args)))

    def probes(self) -> set[str]:
        every = ("sched_waking", "sched_wakeup_new", "sched_switch", "task_rename", "cgroup_attach_task")
        return {tp for tp in every if hasattr(self.lib, f"raw_tracepoint__{tp}")}

    def at(self, ns: int) -> FakeKernel:
        """The clock reads `ns` after the tests' time 0, a second after boot (a stamp of 0 is none)."""
        ctypes.c_uint64.in_dll(self.lib, "fake_now").value = 10**9 + ns
        return self

    def waking(self, task: int) -> None:
        self.fire("sched_waking", task)

    def wakeup_new(self, task: int) -> None:
        self.fire("sched_wakeup_new", task)

    def switch(self, prev: int, next_: int, runnable: bool = False, preempt: bool = False) -> None:
        """prev leaves the CPU (blocked unless `runnable`, or `preempt`), next_ gets it."""
        self.fire("sched_switch", int(preempt), prev, next_, 0 if runnable else 1)

    def wait(self, task: int, start: int, delay: int) -> None:
        """task is woken at `start` and runs `delay` ns later, switched in from the idle task."""
        self.at(start).waking(task)
        self.at(start + delay).switch(self.idle, task, runnable=True)

    # what user space reads

    def _table(self, name: str, n: int) -> list[int]:
        return list((ctypes.c_uint64 * n).in_dll(self.lib, f"{name}_data"))

    def hists(self) -> list[Histogram]:
        g = self.sel.groups
        dist, maxv, sumv = self._table("dist", SLOTS * g), self._table("maxv", g), self._table("sumv", g)
        return [Histogram(dist[i * SLOTS:(i + 1) * SLOTS], maxv[i], sumv[i]) for i in range(g)]

    def counts(self) -> list[int]:
        return [h.total for h in self.hists()]

    def lost(self) -> int:
        return self._table("lost", 1)[0]


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    host_cc()
    return tmp_path_factory.mktemp("wakeup-native")


@pytest.fixture
def kernel(build_dir: Path) -> Iterator[Any]:
    """kernel(selector) -> a fresh FakeKernel running the program for it."""
    yield lambda sel: FakeKernel(sel, build_dir)


# the text bcc compiles: the file, after a prelude of #defines that is all that is generated

SELECTORS = {
    "every task": wakeup.Selector(),
    "pid": wakeup.Selector(tgid=4242),
    "comm": wakeup.Selector(comms=("scxtpp",)),
    "bench names": wakeup.Selector(comms=("scxbench-fast-w", "scxbench-slow-w")),
    "prefix": wakeup.Selector(prefix="kworker/"),
    "prefix and names": wakeup.Selector(comms=("ab", "abc"), prefix="ab"),
    "cgroup": wakeup.Selector(cgroup=wakeup.CgroupRef("/sys/fs/cgroup/a/b", 12345, 2)),
    "all at once": wakeup.Selector(tgid=7, comms=("x",), cgroup=wakeup.CgroupRef("/sys/fs/cgroup/a", 9, 1)),
}


@pytest.mark.parametrize("name", SELECTORS)
def test_the_program_is_the_shipped_file_after_a_prelude_of_defines(name: str) -> None:
    sel = SELECTORS[name]
    source = wakeup.PROGRAM_FILE.read_text()
    text = wakeup.program(sel, layout_for(sel))
    assert text == wakeup.prelude(sel, layout_for(sel)) + source
    lines = wakeup.prelude(sel, layout_for(sel)).splitlines()
    assert lines[0] == wakeup.PRELUDE_HEAD and lines[-1] == '#line 1 "wakeup.bpf.c"'
    assert all(line.startswith("#define ") for line in lines[1:-1]), lines
    assert "#include" not in text  # kernel members are read at the layout's offsets, never via headers


def test_bcc_is_handed_exactly_the_prelude_and_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, list[str]]] = []

    class RecordingBPF:
        def __init__(self, text: str, cflags: list[str]) -> None:
            seen.append((text, cflags))

    fake = types.ModuleType("bcc")
    fake.BPF = RecordingBPF  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bcc", fake)
    sel = SELECTORS["prefix and names"]
    monkeypatch.setattr(wakeup, "kernel_layout", lambda members: layout_for(sel))
    wakeup.compile_for(sel)
    text = wakeup.prelude(sel, layout_for(sel)) + wakeup.PROGRAM_FILE.read_text()
    assert seen == [(text, list(wakeup.CFLAGS))]


def test_the_prelude_defines_only_the_offsets_the_filter_reads() -> None:
    for sel in SELECTORS.values():
        defined = set(re.findall(r"^#define (\w+_OFF) ", wakeup.prelude(sel, layout_for(sel)), re.MULTILINE))
        wanted = {f"{s.removesuffix('_struct').upper()}_{m.upper()}_OFF"
                  for s, members in wakeup.layout_members(sel).items() for m in members}
        assert defined == wanted
        used = set(re.findall(r"\b([A-Z_]+_OFF)\b", wakeup.PROGRAM_FILE.read_text()))
        assert wanted <= used  # every offset the prelude may give is one the file reads


def test_a_missing_program_file_is_exit_7(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(wakeup, "PROGRAM_FILE", tmp_path / "wakeup.bpf.c")
    with pytest.raises(wakeup.ScxctlError) as err:
        wakeup.program(wakeup.Selector(), LAYOUT)
    assert err.value.code == 7 and "reinstall scxctl" in err.value.message


def test_the_file_refuses_to_compile_without_its_prelude(build_dir: Path) -> None:
    src = build_dir / "bare.c"
    src.write_text(BCC_STAND_IN + wakeup.PROGRAM_FILE.read_text())
    proc = subprocess.run([host_cc(), "-fsyntax-only", str(src)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "prepends the #defines" in proc.stderr


@pytest.mark.parametrize("name", SELECTORS)
def test_every_choice_compiles_without_a_warning(name: str, kernel: Any) -> None:
    k = kernel(SELECTORS[name])
    sel = SELECTORS[name]
    # the filter's own events are there only when it reads what they change
    extra = ({"task_rename"} if sel.comms or sel.prefix else set()) | (
        {"cgroup_attach_task"} if sel.cgroup is not None else set())
    assert k.probes() == {"sched_waking", "sched_wakeup_new", "sched_switch"} | extra


# the program's behaviour


def test_a_wake_up_is_timed_from_waking_to_the_switch_onto_a_cpu(kernel: Any) -> None:
    # sched_waking fires in the waker, before the wake-up can be queued to another CPU
    k = kernel(wakeup.Selector())
    t = k.task()
    k.wait(t, 1_000, 5_000)
    k.wait(t, 20_000, 70_000)
    (h,) = k.hists()
    assert h.total == 2 and h.counts[slot_of(5_000)] == 1 and h.counts[slot_of(70_000)] == 1
    assert (h.max_ns, h.sum_ns) == (70_000, 75_000)


def test_the_kernels_slots_are_the_histograms(kernel: Any) -> None:
    k = kernel(wakeup.Selector())
    t = k.task()
    delays = [0, 1, 3, 4, 5, 7, 8, 1023, 1024, 1500, 123_456, 2**40 + 12345, 2**62 + 1]
    for d in delays:
        k.wait(t, 10, d)
    (h,) = k.hists()
    want = [0] * SLOTS
    for d in delays:
        want[slot_of(d)] += 1
    assert h.counts == want


def test_a_new_task_is_timed_from_its_first_wake_up(kernel: Any) -> None:
    k = kernel(wakeup.Selector())
    t = k.task()
    k.at(100).wakeup_new(t)
    k.at(2_100).switch(k.idle, t, runnable=True)
    assert k.hists()[0].counts[slot_of(2_000)] == 1


def test_a_preempted_task_waits_again_a_blocked_one_does_not(kernel: Any) -> None:
    k = kernel(wakeup.Selector())
    a, b = k.task(pid=10), k.task(pid=11)
    k.wait(a, 0, 1_000)
    k.at(5_000).switch(a, b, preempt=True)  # a stays runnable: its wait starts now
    k.at(8_000).switch(b, a)  # b blocks
    k.at(9_000).switch(a, k.idle)
    k.at(50_000).switch(k.idle, b, runnable=True)  # b was not woken: nothing to time
    (h,) = k.hists()
    assert h.total == 2 and h.counts[slot_of(3_000)] == 1


def test_the_idle_task_is_never_timed(kernel: Any) -> None:
    k = kernel(wakeup.Selector())
    t = k.task()
    k.wait(t, 0, 500)  # the idle task, runnable prev, is learned here
    k.at(1_000).switch(t, k.idle)
    k.at(2_000).switch(k.idle, t, runnable=True)  # t was never woken again
    k.at(3_000).switch(t, k.idle, preempt=True)
    k.at(9_000).switch(k.idle, t, runnable=True)  # the preempted t's wait is counted, the idle task's never
    (h,) = k.hists()
    assert h.total == 2 and h.counts[slot_of(6_000)] == 1


def test_pid_keeps_every_thread_of_that_process_only(kernel: Any) -> None:
    k = kernel(wakeup.Selector(tgid=42))
    main, thread, other = k.task(pid=42), k.task(pid=43, tgid=42), k.task(pid=44)
    for t in (main, thread, other):
        k.wait(t, 0, 2_000)
    assert k.counts() == [2]


def test_names_are_groups_in_order_and_must_match_whole(kernel: Any) -> None:
    k = kernel(wakeup.Selector(comms=("ab", "abc")))
    for name, delay in (("ab", 1_000), ("abc", 3_000), ("abcd", 5_000), ("a", 7_000), ("xab", 9_000)):
        k.wait(k.task(comm=name), 0, delay)
    ab, abc = k.hists()
    assert (ab.total, ab.max_ns) == (1, 1_000) and (abc.total, abc.max_ns) == (1, 3_000)


def test_a_prefix_keeps_longer_names(kernel: Any) -> None:
    k = kernel(wakeup.Selector(prefix="kw"))
    for name in ("kw", "kworker/0:1", "k", "xkw"):
        k.wait(k.task(comm=name), 0, 1_000)
    assert k.counts() == [2]


def test_a_prefix_and_names_both_hold(kernel: Any) -> None:
    k = kernel(wakeup.Selector(comms=("abc", "xbc"), prefix="ab"))
    for name in ("abc", "xbc", "ab"):
        k.wait(k.task(comm=name), 0, 1_000)
    assert k.counts() == [1, 0]


def test_long_names_match_the_kernels_15_characters(kernel: Any) -> None:
    k = kernel(wakeup.Selector(comms=("a" * 20,)))
    k.wait(k.task(comm="a" * 15), 0, 1_000)  # what the kernel keeps of a 20-character name
    k.wait(k.task(comm="a" * 14), 0, 1_000)
    assert k.counts() == [1]


def test_cgroup_keeps_the_woken_tasks_in_it_and_below_it(kernel: Any) -> None:
    k = kernel(wakeup.Selector(cgroup=wakeup.CgroupRef("/sys/fs/cgroup/app", 50, 1)))
    root = k.cgroup(1)
    app, other = k.cgroup(50, root), k.cgroup(51, root)
    inside, below, beside = k.task(cgroup=app), k.task(cgroup=k.cgroup(60, app)), k.task(cgroup=other)
    above = k.task(cgroup=root)
    for t, delay in ((inside, 1_000), (below, 2_000), (beside, 4_000), (above, 8_000)):
        k.wait(t, 0, delay)
    (h,) = k.hists()
    assert (h.total, h.sum_ns) == (2, 3_000)


def test_a_rename_is_seen_at_the_next_wake_up(kernel: Any) -> None:
    k = kernel(wakeup.Selector(comms=("kept",)))
    t = k.task(comm="kept")
    k.wait(t, 0, 1_000)
    k.rename(t, "dropped")
    k.wait(t, 0, 1_000)
    k.rename(t, "kept")
    k.wait(t, 0, 1_000)
    assert k.counts() == [2]


def test_a_wake_up_reads_nothing_of_the_task_until_something_changes(kernel: Any) -> None:
    # the verdict is kept in the task's slot: a name written without the rename event goes unseen
    k = kernel(wakeup.Selector(comms=("kept",)))
    t = k.task(comm="kept")
    k.wait(t, 0, 1_000)
    k.rename(t, "dropped", event=False)
    k.wait(t, 0, 1_000)
    assert k.counts() == [2]


def test_a_cgroup_move_is_seen_at_the_next_wake_up(kernel: Any) -> None:
    k = kernel(wakeup.Selector(cgroup=wakeup.CgroupRef("/sys/fs/cgroup/app", 50, 1)))
    root = k.cgroup(1)
    app, other = k.cgroup(50, root), k.cgroup(51, root)
    t = k.task(cgroup=other)
    k.wait(t, 0, 1_000)
    k.move(t, app)
    k.wait(t, 0, 1_000)
    k.move(t, other)
    k.wait(t, 0, 1_000)
    assert k.counts() == [1]


def test_a_new_task_at_a_freed_tasks_address_is_filtered_again(kernel: Any) -> None:
    k = kernel(wakeup.Selector(comms=("kept",)))
    t = k.task(comm="kept")
    k.wait(t, 0, 1_000)
    k.rename(t, "other", event=False)  # t exits; a new task is created at its address
    k.at(10).wakeup_new(t)
    k.at(1_010).switch(k.idle, t, runnable=True)
    assert k.counts() == [1]


def _slot(addr: int) -> int:
    return ((addr * 0x9E3779B97F4A7C15) % 2**64) >> (64 - wakeup.STAMP_BITS)


def _sharing_a_slot(k: FakeKernel) -> tuple[int, int]:
    """Two fake tasks whose addresses hash to the same stamp slot."""
    seen: dict[int, int] = {}
    while True:
        t = k.task(comm="kept")
        other = seen.setdefault(_slot(t), t)
        if other != t:
            return other, t


def test_a_wait_lost_to_a_slot_collision_is_counted(kernel: Any) -> None:
    k = kernel(wakeup.Selector(comms=("kept",)))
    a, b = _sharing_a_slot(k)
    k.at(0).waking(a)
    k.at(100).waking(b)  # takes the slot: a's wait is lost
    k.at(1_000).switch(k.idle, a, runnable=True)
    k.at(2_000).switch(a, b)
    assert k.lost() == 1 and k.hists()[0].total == 1 and k.hists()[0].max_ns == 1_900


def test_an_untraced_task_leaves_an_armed_slot_alone(kernel: Any) -> None:
    k = kernel(wakeup.Selector(comms=("kept",)))
    a, b = _sharing_a_slot(k)
    k.rename(b, "dropped", event=False)
    k.at(0).waking(a)
    k.at(100).waking(b)
    k.at(1_000).switch(k.idle, a, runnable=True)
    assert k.lost() == 0 and k.hists()[0].max_ns == 1_000


# the real compiler: bcc, with the running kernel's headers, as root


def _bcc_unavailable() -> str | None:
    gap = deps.missing()
    if gap is not None:
        return f"bcc cannot compile here: {gap.message}"
    if os.geteuid() != 0:
        return "loading BPF programs needs root"
    return None


@pytest.mark.parametrize("name", SELECTORS)
def test_bcc_compiles_loads_and_attaches_the_program(name: str) -> None:
    reason = _bcc_unavailable()
    if reason is not None:
        pytest.skip(reason)
    sel = SELECTORS[name]
    bpf = wakeup.compile_for(sel)  # at the running kernel's layout; attaches the probes
    try:
        assert len(bpf["dist"]) == SLOTS * sel.groups and len(bpf["start"]) == 1 << wakeup.STAMP_BITS
        for table in ("maxv", "sumv"):
            assert len(bpf[table]) == sel.groups
        assert int(bpf["lost"][ctypes.c_int(0)].value) == 0
    finally:
        bpf.cleanup()


# packaging: the file goes wherever the module goes


def test_the_program_file_is_package_data() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["scxctl.trace"]
    assert wakeup.PROGRAM_FILE.parent == ROOT / "scxctl" / "trace"
    assert any(fnmatch(wakeup.PROGRAM_FILE.name, p) for p in patterns)


def test_setuptools_puts_the_file_beside_the_module(tmp_path: Path) -> None:
    # what pip and the .deb (pybuild) install: setuptools's build of the package tree
    for item in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / item, tmp_path / item)
    shutil.copytree(ROOT / "scxctl", tmp_path / "scxctl", ignore=shutil.ignore_patterns("__pycache__"))
    build = [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
             "--build-lib", str(tmp_path / "lib")]
    proc = subprocess.run(build, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    built = tmp_path / "lib" / "scxctl" / "trace"
    assert (built / "wakeup.py").is_file()
    assert (built / wakeup.PROGRAM_FILE.name).read_text() == wakeup.PROGRAM_FILE.read_text()
