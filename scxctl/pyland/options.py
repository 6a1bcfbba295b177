"""What `scxctl run` can be asked for, with its defaults: the one place they are written.

Kept apart from scheduler.py, which imports libbpf and the loop, so that the CLI can declare its
options from these defaults without loading any of that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from scxctl.pyland.policy import DEFAULT_MIN_SLICE_NS, NSEC_PER_USEC
from scxctl.sysfs import SysRoot

MAX_HOLD_MS = 4000  # cpu_max_hold_ms's bound: the kernel ejects a scheduler whose runnable task waited 5 s


@dataclass
class RunOptions:
    policy: str = "deadline"
    builtin_idle: bool = True
    slice_us: int = 20_000  # user-space budget
    slice_min_us: int = DEFAULT_MIN_SLICE_NS // NSEC_PER_USEC  # BPF default/refill slice
    partial: bool = False
    stats_interval: float = 5.0  # 0: no periodic summary
    max_backlog: int = 1024  # records Python may be behind before BPF schedules new tasks itself
    ring_kib: int = 0  # the queued ring in KiB (a power of two); 0: the object's 512 KiB, about 3600 tasks
    round_trip: bool = False  # every enqueue waits for decide(), even for a policy that steers
    report_ms: int = 100  # steer mode: a task reports what it did at most this often
    wake_preempt: bool = True  # steer mode: a wake-up with the earlier deadline preempts (gated)
    direct_wake: bool = True  # latency-critical tasks (the policy's preempt) wake without a round trip
    new_direct: bool = True  # a task's first enqueue is placed by BPF; the policy meets it at its second
    starve_ms: int = 1000  # a task waiting this long in a DSQ runs next, whatever its deadline
    cpu_max_hold_ms: int = 2000  # cpu.max: a task held this long runs, its cgroup throttled or not
    allow_stale: bool = False
    policy_budget_ms: int = 100  # decide() running longer detaches pyland (0: no watchdog)
    attach_timeout: float = 10.0  # seconds for sysfs to show pyland enabled after attach
    exit_timeout: float = 5.0  # seconds to wait for ops.exit after detaching
    object_path: Path | None = None  # None: the search order of scxctl.bpf.object
    sysroot: SysRoot = field(default_factory=SysRoot)
