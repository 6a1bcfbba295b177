"""Wake-up to run latency measured in the kernel with bcc (runqlat's design, filtered by the woken task).

Raw tracepoints: `sched_waking` / `sched_wakeup_new` stamp the woken task, `sched_switch` stamps a
`prev` that stays runnable (preempted) and turns the stamp of `next` into a delay. runqlat stamps at
`sched_wakeup` instead, which for a wake-up of a task on another CPU's idle run queue fires on that
CPU, after the IPI and the CPU's way out of idle: a delay the woken task does see, and most of it
(under TCG a futex ping-pong's traced p50 was 7 us from `sched_wakeup`, 54 us from `sched_waking`
against 61 us by the load's own clock). `sched_waking` fires in the same try_to_wake_up calls as
`sched_wakeup`, just before it, in the waker's context, so the wake-ups counted are the same.

The hot path is what a tracer on every wake-up and switch costs, so it calls as few helpers as it
can. Stamps live in an array slot per hash of the task's address (the tracepoints pass it; the
verifier inlines array lookups, where a hash map costs a helper call and a key hash). A slot keeps
the filter's verdict on its task (tgid, comm, cgroup of the woken task, not the waker's), decided
again only when the slot changes hands, for a new task, or after a rename or cgroup move anywhere:
a wake-up reads nothing of the task. The histograms (quarter-octave, scxctl.trace.hist, with each
group's maximum and sum beside them) are per CPU, so a switch updates them without atomics; user
space adds the CPUs up and never reads single events. Under TCG this took the programs' run time
per futex ping-pong round trip, above empty programs', from 3.6 to 1.6 us (kernel.bpf_stats).

The program is wakeup.bpf.c beside this module, which the package ships. Only the choices of a run
are generated: a prelude of #defines for the selector (constants, no maps to configure) that the
file's #ifdefs read. bcc compiles the two at start: with the kernel headers of the running kernel
(bcc's own helpers include some), and `-fms-extensions -Wno-microsoft-anon-tag` always (6.19+
headers need them; bcc < 0.37 does not add them itself). It includes no kernel header of its own:
it reads the few task and cgroup members it needs at the offsets the running kernel's BTF gives
(kernel_layout), which the prelude carries.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scxctl.bpf.btf import btf_member_offsets
from scxctl.bpf.errors import BpfError
from scxctl.errors import ExitCode, ScxctlError, UsageError
from scxctl.sysfs import VMLINUX_BTF
from scxctl.trace import deps
from scxctl.trace.hist import SLOTS, Histogram

CFLAGS = ("-fms-extensions", "-Wno-microsoft-anon-tag")
COMM_LEN = 15  # TASK_COMM_LEN - 1: the kernel truncates longer names
CGROUP_ROOT = Path("/sys/fs/cgroup")
STAMP_BITS = 16  # 65536 stamp slots
# The program, a C file shipped beside this module (package data), and the line put before it
PROGRAM_FILE = Path(__file__).with_name("wakeup.bpf.c")
PRELUDE_HEAD = "/* the choices of this run, from scxctl.trace.wakeup; its program follows */"


@dataclass(frozen=True)
class CgroupRef:
    path: str
    id: int  # the cgroup2 directory's inode number, which is the kernel's cgroup id (kernfs id)
    level: int  # depth below the root (the root is 0): the index into cgroup->ancestors[]


def resolve_cgroup(arg: str, root: Path = CGROUP_ROOT) -> CgroupRef:
    """`/sys/fs/cgroup/a/b`, `/a/b` or `a/b` -> the cgroup v2 directory and its id."""
    if not (root / "cgroup.controllers").is_file():
        raise UsageError(f"--cgroup needs the cgroup v2 hierarchy at {root}")
    p = Path(arg)
    if not p.is_absolute() or not p.is_relative_to(root):
        p = root / arg.lstrip("/")
    p = Path(os.path.normpath(p))
    if not p.is_relative_to(root) or not (p / "cgroup.procs").is_file():
        raise UsageError(f"no cgroup {arg!r} (looked for {p})")
    return CgroupRef(str(p), p.stat().st_ino, len(p.relative_to(root).parts))


@dataclass(frozen=True)
class Selector:
    """Which woken tasks count; all given conditions must hold.

    `comms`: exact task names (each its own histogram group, in order); `prefix`: a name prefix
    (one group). Without names there is one group holding every selected task.
    """

    tgid: int | None = None
    comms: tuple[str, ...] = ()
    prefix: str | None = None
    cgroup: CgroupRef | None = None

    @property
    def groups(self) -> int:
        return max(len(self.comms), 1)

    def labels(self) -> list[str]:
        return list(self.comms) or [self.prefix + "*" if self.prefix else "all"]

    def describe(self) -> str:
        parts = [f"pid {self.tgid}"] if self.tgid is not None else []
        parts += [f"comm {c}" for c in self.comms] + ([f"comm {self.prefix}*"] if self.prefix else [])
        parts += [f"cgroup {self.cgroup.path}"] if self.cgroup is not None else []
        return ", ".join(parts) or "every task"

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.tgid,
            "comm": list(self.comms) or None,
            "comm_prefix": self.prefix,
            "cgroup": None if self.cgroup is None else {"path": self.cgroup.path, "id": self.cgroup.id},
        }


def _name_test(name: str, exact: bool) -> str:
    """C condition on `c` (the task's comm) for one name; exact also wants the terminator."""
    raw = name.encode()[:COMM_LEN]
    if not raw:
        raise UsageError("a task name to match must not be empty")
    terms = [f"(c)[{i}] == {b}" for i, b in enumerate(raw)]
    if exact and len(raw) < COMM_LEN:
        terms.append(f"(c)[{len(raw)}] == 0")
    return " && ".join(terms)


# What the program reads of the kernel's structs, at offsets from its BTF (kernel_layout)
CGROUP_MEMBERS = {"css_set": ("dfl_cgrp",), "cgroup": ("kn", "level", "ancestors"), "kernfs_node": ("id",)}


def layout_members(sel: Selector) -> dict[str, tuple[str, ...]]:
    """The members the program for `sel` reads: only what its filter needs."""
    task = ("pid",) + (("tgid",) if sel.tgid is not None else ())
    task += ("comm",) if sel.comms or sel.prefix else ()
    if sel.cgroup is None:
        return {"task_struct": task}
    return {"task_struct": (*task, "cgroups"), **CGROUP_MEMBERS}


@dataclass(frozen=True)
class Layout:
    """Byte offsets of the members the program reads (struct -> member -> offset)."""

    offsets: dict[str, dict[str, int]]

    def at(self, struct: str, member: str) -> int:
        return self.offsets[struct][member]


def kernel_layout(members: dict[str, tuple[str, ...]], btf: Path = Path(VMLINUX_BTF)) -> Layout:
    """The running kernel's layout of `members` (layout_members), from its BTF.

    Offsets instead of `#include <linux/sched.h>` (and linux/cgroup.h for --cgroup): bcc parsed
    those headers at every start, most of its compile time (20 s of 24 under TCG, twice that with
    the cgroup headers)."""
    try:
        return Layout(btf_member_offsets(btf, members))
    except OSError as exc:
        raise ScxctlError(f"cannot read the kernel's BTF ({btf}): {exc.strerror}", ExitCode.BPF) from None
    except BpfError as exc:
        raise ScxctlError(f"the wake-up tracer cannot find what it reads of the kernel: {exc}",
                          ExitCode.BPF) from None


def _define(name: str, value: object) -> str:
    return f"#define {name} {value}"


def _offset_defines(layout: Layout) -> list[str]:
    """STRUCT_MEMBER_OFF, the byte offset of each member the program reads (task_struct: TASK)."""
    return [_define(f"{struct.removesuffix('_struct').upper()}_{member.upper()}_OFF", off)
            for struct, members in layout.offsets.items() for member, off in members.items()]


def _comm_defines(sel: Selector) -> list[str]:
    """The name filter as conditions on the task's comm `c`: the prefix's, then a group per name."""
    out = []
    if sel.prefix:
        out.append(_define("FILTER_COMM_PREFIX(c)", f"({_name_test(sel.prefix, exact=False)})"))
    if sel.comms:
        # the first name that matches gives the group, as a chain of conditionals
        chain = "".join(f"({_name_test(name, exact=True)}) ? {i} : " for i, name in enumerate(sel.comms))
        out.append(_define("FILTER_COMM_GROUP(c)", f"({chain}-1)"))
    return out


def prelude(sel: Selector, layout: Layout) -> str:
    """The #defines that make PROGRAM_FILE the program for `sel`, at the kernel's `layout`."""
    lines = [PRELUDE_HEAD, _define("SLOTS", SLOTS), _define("GROUPS", sel.groups),
             _define("STAMP_BITS", STAMP_BITS), *_offset_defines(layout)]
    if sel.tgid is not None:
        lines.append(_define("FILTER_TGID", int(sel.tgid)))
    if sel.cgroup is not None:
        lines += [_define("FILTER_CGROUP_ID", f"{int(sel.cgroup.id)}ULL"),
                  _define("FILTER_CGROUP_LEVEL", int(sel.cgroup.level))]
    lines += _comm_defines(sel)
    lines.append(f'#line 1 "{PROGRAM_FILE.name}"')  # the compiler's messages name the file's lines
    return "\n".join(lines) + "\n"


def program_source() -> str:
    """PROGRAM_FILE's text: the program without the #defines of a run."""
    try:
        return PROGRAM_FILE.read_text()
    except OSError as exc:
        raise ScxctlError(f"the wake-up tracer's program is missing ({PROGRAM_FILE}: {exc.strerror}): "
                          "reinstall scxctl", ExitCode.BPF) from None


def program(sel: Selector, layout: Layout) -> str:
    """The BPF C text bcc compiles for a selector: its prelude, then PROGRAM_FILE."""
    return prelude(sel, layout) + program_source()


@contextlib.contextmanager
def _stderr_captured() -> Iterator[Callable[[], str]]:
    """libbcc prints clang's diagnostics on fd 2: keep them for the one-line error, never show them."""
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)

        def text() -> str:
            tmp.seek(0)
            return tmp.read().decode(errors="replace")

        try:
            yield text
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _first_error(diag: str) -> str:
    for line in diag.splitlines():
        if "error:" in line or "Unable to find kernel headers" in line:
            return line.strip()
    lines = [ln.strip() for ln in diag.splitlines() if ln.strip()]
    return lines[-1] if lines else "no diagnostics"


def compile_program(text: str) -> Any:
    """bcc's BPF object for `text` (compiled and loaded, raw tracepoint probes attached).

    Failures become one-line ScxctlErrors with exit 7: bcc missing, headers missing, or the first
    compiler error line.
    """
    try:
        from bcc import BPF
    except ImportError:
        line = deps.install_line(deps.kernel_release())
        raise ScxctlError(f"the bcc Python module is not installed: {line}", ExitCode.BPF) from None
    with _stderr_captured() as diag:
        try:
            return BPF(text=text, cflags=list(CFLAGS))
        except Exception as exc:  # bcc raises bare Exception for compile and load failures
            reason = _first_error(diag())
            if "kernel headers" in reason:
                rel = deps.kernel_release()
                raise ScxctlError(f"no kernel headers for {rel}: apt install {deps.headers_package(rel)}",
                                  ExitCode.BPF) from None
            raise ScxctlError(f"bcc could not compile or load the wake-up tracer: {reason} ({exc})",
                              ExitCode.BPF) from None


def compile_for(sel: Selector) -> Any:
    """bcc's loaded and attached program for `sel`, at the running kernel's layout."""
    return compile_program(program(sel, kernel_layout(layout_members(sel))))


@dataclass
class WakeupTracer:
    """The loaded program; `read()` returns one cumulative histogram per group.

    Counts never reset in the kernel (a reset would race with increments); `max_ns` is the largest
    delay since the previous read (reset on read), so an interval's maximum is exact up to that race.
    The kernel keeps counts, sums and maxima per CPU; a read adds the CPUs up.
    """

    selector: Selector
    compile_s: float = 0.0
    _bpf: Any = None
    _peak: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        t0 = time.monotonic()
        self._bpf = compile_for(self.selector)
        self.compile_s = time.monotonic() - t0
        self._peak = [0] * self.selector.groups

    def read(self) -> list[Histogram]:
        dist, maxv, sumv = self._bpf["dist"], self._bpf["maxv"], self._bpf["sumv"]
        groups = self.selector.groups
        counts = [sum(dist[ctypes.c_int(i)]) for i in range(SLOTS * groups)]
        out = []
        for g in range(groups):
            key = ctypes.c_int(g)
            m = max(maxv[key])
            maxv[key] = maxv.Leaf()  # zero on every CPU
            self._peak[g] = max(self._peak[g], m)
            out.append(Histogram(counts[g * SLOTS:(g + 1) * SLOTS], m, sum(sumv[key])))
        return out

    def lost(self) -> int:
        """Waits dropped because another task took their stamp slot (a hash collision)."""
        return int(self._bpf["lost"][ctypes.c_int(0)].value)

    def overall_max(self) -> list[int]:
        """The largest delay per group since the tracer started (through the last read)."""
        return list(self._peak)

    def close(self) -> None:
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None

    def __enter__(self) -> WakeupTracer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_tracer(sel: Selector) -> WakeupTracer:
    """Check bcc and the headers (one-line exit 7 errors), then compile, load and attach."""
    deps.require()
    return WakeupTracer(sel)


def interval_hists(now: Sequence[Histogram], before: Sequence[Histogram]) -> list[Histogram]:
    """Per-group samples between two reads (each read's max already covers just its interval)."""
    return [n.minus(b) for n, b in zip(now, before, strict=True)]
