"""struct pyland_config (bpf/pyland.h), the .rodata the BPF core reads its settings from, by field name.

records.CONFIG packs positional values: a value in a neighbour's place still packs, and becomes a
setting nobody asked for. Here every value is named, and the order is written once, in the C order
that tests/test_pyland_config_layout.py checks against the header.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields

from scxctl.pyland.records import CONFIG


@dataclass(frozen=True, kw_only=True)
class PylandConfig:
    """The C members in the C order; keyword-only, so that no value can go to another field."""

    slice_ns: int  # the BPF default/refill slice, not the user-space budget
    usersched_tgid: int  # the scheduler process: its threads never wait for its own decisions
    builtin_idle: int
    timer_ns: int
    max_backlog: int
    starve_ns: int
    direct_wake_ns: int  # 0: off
    max_slice_ns: int
    stall_ns: int  # the policy budget; 0: off
    new_direct: int
    bw_max_hold_ns: int  # cpu.max: the longest a throttled cgroup's task is held
    steer: int  # 1: BPF places every enqueue from the policy's parameters; 0: the round trip
    lag_ns: int  # steer: the sleep credit a waking task may bring
    report_ns: int  # steer: the most often a task reports what it did
    preempt_gap_ns: int  # steer: the most often a wake-up may preempt one CPU; 0: never

    def pack(self) -> bytes:
        return CONFIG.pack(*astuple(self))


CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PylandConfig))
# a field added on one side only would shift every later value, or fail only at pack time
assert len(CONFIG_FIELDS) == len(CONFIG.unpack(bytes(CONFIG.size)))
