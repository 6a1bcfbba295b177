"""Typed access to pyland's shared .bss (struct pyland_shared) through the live mmap.

Each counter has exactly one writer (see bpf/pyland.h). The counters user space owns are published
with single aligned 8-byte stores through a memoryview cast to "Q": on x86-64 that is one plain
store, which is all the BPF side needs to read a consistent value.
"""

from __future__ import annotations

from dataclasses import dataclass

from scxctl.pyland.records import (
    COUNTER_INDEX,
    EXIT_INFO,
    EXIT_OFFSET,
    SHARED_COUNTERS,
    SHARED_SIZE,
)

# enum scx_exit_kind (kernel/sched/ext_internal.h); names as `scxctl run` prints them
EXIT_KINDS = {
    0: "NONE",
    1: "DONE",
    64: "UNREG",
    65: "UNREG_BPF",
    66: "UNREG_KERN",
    67: "SYSRQ",
    68: "PARENT",
    69: "PARENT_KILL",
    1024: "ERROR",
    1025: "ERROR_BPF",
    1026: "ERROR_STALL",
    1027: "ERROR_REENQ",
    1028: "ERROR_RESCUE",
}
EXIT_UNREG = 64


def exit_kind_name(kind: int) -> str:
    return EXIT_KINDS.get(kind, f"UNKNOWN({kind})")


@dataclass(frozen=True)
class ExitInfo:
    kind: int
    exit_code: int
    reason: str
    msg: str

    @property
    def kind_name(self) -> str:
        return exit_kind_name(self.kind)

    @property
    def is_error(self) -> bool:
        return self.kind >= 1024

    def describe(self) -> str:
        parts = [self.kind_name]
        if self.reason:
            parts.append(f"({self.reason})")
        if self.msg:
            parts.append(f"- {self.msg}")
        return " ".join(parts)


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


class SharedState:
    """The .bss of a loaded pyland object (or of a test object with the same struct first)."""

    def __init__(self, view: memoryview) -> None:
        if len(view) < SHARED_SIZE:
            raise ValueError(f"shared area is {len(view)} bytes, pyland needs {SHARED_SIZE}")
        self._raw = view
        # the hot path writes through `counters` directly (index constants in records.py)
        self.counters = view[: EXIT_OFFSET].cast("Q")

    def get(self, name: str) -> int:
        return int(self.counters[COUNTER_INDEX[name]])

    def snapshot(self) -> dict[str, int]:
        values = self.counters.tolist()
        return dict(zip(SHARED_COUNTERS, values, strict=True))

    def exit_kind(self) -> int:
        """Cheap check for the loop: non-zero once ops.exit ran (the kind is stored last)."""
        return int(self._raw[EXIT_OFFSET : EXIT_OFFSET + 8].cast("q")[0])

    def exit_info(self) -> ExitInfo:
        kind, code, reason, msg = EXIT_INFO.unpack_from(self._raw, EXIT_OFFSET)
        return ExitInfo(kind, code, _cstr(reason), _cstr(msg))

    def clear(self) -> None:
        """Zero the whole area, as a freshly loaded object's .bss is (a restart attaches again)."""
        self._raw[:SHARED_SIZE] = bytes(SHARED_SIZE)

    def release(self) -> None:
        """Drop our views so the underlying mmap can be closed."""
        self.counters.release()
