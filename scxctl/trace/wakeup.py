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

The program is generated for the selector (constants, no maps to configure) and compiled by bcc at
start: with the kernel headers of the running kernel (bcc's own helpers include some), and
`-fms-extensions -Wno-microsoft-anon-tag` always (6.19+ headers need them; bcc < 0.37 does not add
them itself). It includes no kernel header of its own: it reads the few task and cgroup members it
needs at the offsets the running kernel's BTF gives (kernel_layout).
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

from scxctl.bpf.errors import BpfError
from scxctl.bpf.libbpf import btf_member_offsets
from scxctl.errors import ExitCode, ScxctlError, UsageError
from scxctl.sysfs import VMLINUX_BTF
from scxctl.trace import deps
from scxctl.trace.hist import SLOTS, Histogram

CFLAGS = ("-fms-extensions", "-Wno-microsoft-anon-tag")
COMM_LEN = 15  # TASK_COMM_LEN - 1: the kernel truncates longer names
CGROUP_ROOT = Path("/sys/fs/cgroup")
STAMP_BITS = 16  # 65536 stamp slots


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
    terms = [f"c[{i}] == {b}" for i, b in enumerate(raw)]
    if exact and len(raw) < COMM_LEN:
        terms.append(f"c[{len(raw)}] == 0")
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


def _read(dst: str, base: str, layout: Layout, struct: str, member: str, extra: int = 0) -> str:
    """bpf_probe_read_kernel of `dst` from `base` + the member's offset (+ `extra` bytes)."""
    off = layout.at(struct, member) + extra
    return f"    bpf_probe_read_kernel(&{dst}, sizeof({dst}), (const char *){base} + {off});"


def program(sel: Selector, layout: Layout) -> str:
    """The BPF C text for a selector (constants inlined; see the module docstring)."""
    lines = [
        f"#define SLOTS {SLOTS}",
        f"#define GROUPS {sel.groups}",
        f"#define STAMP_BITS {STAMP_BITS}",
        "struct stamp {",
        "    u64 task;   /* the address of the task the slot holds (0: none yet) */",
        "    u64 ts;     /* when the task began to wait; 0: not waiting */",
        "    u32 gen;    /* filter_gen when `group` was decided */",
        "    s32 group;  /* its histogram group; -1: the filter drops it */",
        "};",
        "/*",
        " * One slot per hash of the task's address (the tracepoints pass it, nothing to read): an",
        " * array, whose lookups the verifier inlines, where a hash map would cost a helper call and",
        " * a key hash at every wake-up and switch. A task that finds its slot held by another takes",
        " * it over, unless the other is waiting and the newcomer is not traced; a traced wait lost",
        " * that way is counted (`lost`).",
        " */",
        "BPF_ARRAY(start, struct stamp, 1 << STAMP_BITS);",
        "BPF_ARRAY(filter_gen, u32, 1);  /* bumped when what the filter reads may have changed */",
        "BPF_ARRAY(lost, u64, 1);",
        "BPF_PERCPU_ARRAY(idle_task, u64, 1);  /* this CPU's idle task, learned at first sight */",
        "/* per CPU, so that sched_switch updates them without atomics (user space sums the CPUs) */",
        "BPF_PERCPU_ARRAY(dist, u64, SLOTS * GROUPS);",
        "BPF_PERCPU_ARRAY(maxv, u64, GROUPS);",
        "BPF_PERCPU_ARRAY(sumv, u64, GROUPS);",
        "",
        "static __always_inline u32 pid_of(const void *p)",
        "{",
        "    u32 pid = 0;",
        _read("pid", "p", layout, "task_struct", "pid"),
        "    return pid;",
        "}",
        "",
        "/* the group of a woken task (pid != 0: stamp() checked), -1 for one the filter drops */",
        "static __always_inline int group_of(const void *p)",
        "{",
    ]
    if sel.tgid is not None:
        lines += [
            "    u32 tgid = 0;",
            _read("tgid", "p", layout, "task_struct", "tgid"),
            f"    if (tgid != {int(sel.tgid)})",
            "        return -1;",
        ]
    if sel.cgroup is not None:
        lines += [
            "    const void *cs = NULL, *cg = NULL, *anc = NULL, *kn = NULL;",
            "    int level = 0;",
            "    u64 id = 0;",
            _read("cs", "p", layout, "task_struct", "cgroups"),
            _read("cg", "cs", layout, "css_set", "dfl_cgrp"),
            _read("level", "cg", layout, "cgroup", "level"),
            f"    if (level < {sel.cgroup.level})",
            "        return -1;",
            _read("anc", "cg", layout, "cgroup", "ancestors", 8 * sel.cgroup.level),
            _read("kn", "anc", layout, "cgroup", "kn"),
            _read("id", "kn", layout, "kernfs_node", "id"),
            f"    if (id != {sel.cgroup.id}ULL)",
            "        return -1;",
        ]
    if sel.comms or sel.prefix:
        lines += [
            "    unsigned char c[16] = {};",
            _read("c", "p", layout, "task_struct", "comm"),
        ]
        if sel.prefix:
            lines += [f"    if (!({_name_test(sel.prefix, exact=False)}))", "        return -1;"]
        if sel.comms:
            for i, name in enumerate(sel.comms):
                lines += [f"    if ({_name_test(name, exact=True)})", f"        return {i};"]
            lines.append("    return -1;")
    if not sel.comms:  # with names, the last name's test above returns
        lines.append("    return 0;")
    lines += [
        "}",
        "",
        "static __always_inline struct stamp *slot_for(u64 p)",
        "{",
        "    u32 i = (u32)((p * 0x9E3779B97F4A7C15ULL) >> (64 - STAMP_BITS));  /* Fibonacci hashing */",
        "    return start.lookup(&i);",
        "}",
        "",
        "/*",
        " * Arm p's slot (p is never the idle task: it is not woken, and sched_switch skips it as",
        " * prev). The filter runs when the slot changes hands, when p is new (`fresh`: a new task",
        " * may sit at a freed one's address) and after any change to what the filter reads (filter_gen);",
        " * otherwise the group decided before stands, and a wake-up reads nothing of the task.",
        " */",
        "static __always_inline int stamp(u64 p, bool fresh)",
        "{",
        "    u32 zero = 0;",
        "    struct stamp *st = slot_for(p);",
        "    u32 *gen = filter_gen.lookup(&zero);",
        "    if (!st || !gen)",
        "        return 0;",
        "    if (st->task != p) {",
        "        int g = group_of((const void *)p);",
        "        if (st->ts) {  /* another task's wait is armed in this slot */",
        "            if (g < 0)",
        "                return 0;  /* p is not traced: leave the slot to the other */",
        "            lost.increment(zero);",
        "        }",
        "        st->task = p;",
        "        st->group = g;",
        "        st->gen = *gen;",
        "    } else if (fresh || st->gen != *gen) {",
        "        st->group = group_of((const void *)p);",
        "        st->gen = *gen;",
        "    }",
        "    /* ts last: a nonzero ts is what arms the slot */",
        "    st->ts = st->group >= 0 ? bpf_ktime_get_ns() : 0;",
        "    return 0;",
        "}",
        "",
        "static __always_inline u32 slot_of(u64 d)",
        "{",
        "    if (d < 4)",
        "        return d;",
        "    u32 lg = 0;",
        "    u64 v = d;",
        "    if (v >> 32) { v >>= 32; lg += 32; }",
        "    if (v >> 16) { v >>= 16; lg += 16; }",
        "    if (v >> 8) { v >>= 8; lg += 8; }",
        "    if (v >> 4) { v >>= 4; lg += 4; }",
        "    if (v >> 2) { v >>= 2; lg += 2; }",
        "    if (v >> 1) { lg += 1; }",
        "    return 4 * lg + ((d >> (lg - 2)) & 3);",
        "}",
        "",
        "/*",
        " * The waker's side of try_to_wake_up, before the wake-up may be queued to the target CPU's",
        " * wake list: sched_wakeup would fire only once that CPU took the IPI and left idle.",
        " */",
        "RAW_TRACEPOINT_PROBE(sched_waking)",
        "{",
        "    return stamp(ctx->args[0], false);",
        "}",
        "",
        "RAW_TRACEPOINT_PROBE(sched_wakeup_new)",
        "{",
        "    return stamp(ctx->args[0], true);",
        "}",
        "",
        "RAW_TRACEPOINT_PROBE(sched_switch)",
        "{",
        "    /* TP_PROTO(bool preempt, prev, next, unsigned int prev_state) */",
        "    u64 prev = ctx->args[1], next = ctx->args[2];",
        "    u32 zero = 0;",
        "    u64 *idle = idle_task.lookup(&zero);",
        "    if (!idle)",
        "        return 0;",
        "    /*",
        "     * The idle task is half of all switches on a machine that is not busy. It is recognised",
        "     * by its address (per CPU) rather than by reading its pid, a helper call, at every",
        "     * switch. It is learned where it shows up as a runnable prev.",
        "     */",
        "    if ((ctx->args[0] || (unsigned int)ctx->args[3] == 0) && prev != *idle) {",
        "        if (pid_of((const void *)prev) == 0)",
        "            *idle = prev;",
        "        else",
        "            stamp(prev, false);  /* preempted: it waits again from now */",
        "    }",
        "    if (next == *idle)",
        "        return 0;",
        "    struct stamp *st = slot_for(next);",
        "    if (!st || st->task != next || !st->ts)",
        "        return 0;",
        "    u64 d = bpf_ktime_get_ns() - st->ts;",
        "    u32 g = st->group;",
        "    st->ts = 0;  /* disarmed; the slot stays the task's for its next wake-up */",
        "    if (g >= GROUPS)",
        "        return 0;",
        "    /*",
        "     * This CPU's counters. Only this program writes them, and sched_switch runs with",
        "     * interrupts off and the program cannot nest in itself on a CPU: plain adds suffice.",
        "     */",
        "    u32 idx = g * SLOTS + slot_of(d);",
        "    u64 *cnt = dist.lookup(&idx);",
        "    if (cnt)",
        "        *cnt += 1;",
        "    u64 *sum = sumv.lookup(&g);",
        "    if (sum)",
        "        *sum += d;",
        "    u64 *m = maxv.lookup(&g);",
        "    if (m && d > *m)",
        "        *m = d;",
        "    return 0;",
        "}",
    ]
    # What the filter reads can change under a task: redecide every group after such a change
    # (rare events; the groups are decided again lazily, at each task's next stamp)
    changes = (["task_rename"] if sel.comms or sel.prefix else []) + (
        ["cgroup_attach_task"] if sel.cgroup is not None else [])
    for tp in changes:
        lines += ["", f"RAW_TRACEPOINT_PROBE({tp})", "{", "    u32 zero = 0;",
                  "    filter_gen.increment(zero);", "    return 0;", "}"]
    return "\n".join(lines) + "\n"


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
