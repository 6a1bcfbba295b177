"""The binary layouts shared with the BPF core (bpf/pyland.h), as Python struct formats.

Native byte order with standard sizes and no implicit padding ("="): every field of these C structs
is naturally aligned already, so the formats equal the C layout byte for byte.
tests/test_pyland_records.py checks each size and offset against the BTF of the built object.
"""

from __future__ import annotations

import struct

OPS_NAME = "pyland"
# struct pyland_decision.flags
DECISION_PREEMPT = 1
DECISION_DIRECT_WAKE = 2
# struct pyland_task.kind
REC_ENQUEUE = 0  # the task waits for decide()
REC_REPORT = 1  # steer mode: what it did, for observe()
# struct pyland_params.flags
PARAM_SYNC = 1
PARAM_CPU = 2
PARAM_FIFO = 4
PARAM_PREEMPTIBLE = 8
NR_CLASSES = 64
# enum pyland_compat: what ops.init found this kernel cannot give (shared counter compat_missing)
COMPAT_MISSING = {
    1 << 0: "scx_bpf_select_cpu_dfl (wake-ups are not moved to idle CPUs)",
    1 << 1: "scx_bpf_pick_idle_cpu (the heartbeat preempts the scheduler's CPU)",
    1 << 2: "scx_bpf_dispatch_nr_slots (decisions drained in batches of 32)",
    1 << 3: "scx_bpf_create_dsq (the kernel's FIFO DSQs instead of pyland's deadline-ordered ones)",
    1 << 4: "scx_bpf_kick_cpu (CPUs are woken by the kernel only; no preemption kicks)",
    1 << 5: "bpf_iter_scx_dsq_new (no starvation rescue; the kernel's FIFO DSQs instead)",
    1 << 6: "scx_bpf_error_bstr (internal errors fall back instead of stopping pyland)",
    1 << 7: "scx_bpf_dsq_nr_queued (DSQ lengths unknown: direct wake-ups only right after a dispatch)",
    1 << 8: "the cgroup bandwidth hooks (6.17+): cpu.max quotas are not enforced for pyland's tasks",
}
COMPAT_NO_CGROUP_BW = 1 << 8
REASON_LEN = 128
MSG_LEN = 1024

# struct pyland_task: pid, cpu, nr_cpus_allowed, flags, start_ts, stop_ts, exec_runtime, weight,
# placed, vtime, enq_cnt, comm[16], cgroup_id, throttled, run_ns, kind, nr_wakeups, waker, class_id,
# deadline, sleep_ns, min_burst_ns
TASK = struct.Struct("=iiIIQQQIIQQ16sQQQIIiIQQQ")
# struct pyland_decision: pid, cpu, flags, slice_ns, deadline, vtime, enq_cnt
DECISION = struct.Struct("=iiQQQQQ")
# struct pyland_update: pid, class_id, own, pad, sent_at, then struct pyland_params: slice_ns, lag_ns,
# weight, cpu, flags, pad
UPDATE = struct.Struct("=iIIIQQqIiII")
# struct pyland_config (.rodata): slice_ns, usersched_tgid, builtin_idle, timer_ns, max_backlog, starve_ns,
# direct_wake_ns, max_slice_ns, stall_ns, new_direct, bw_max_hold_ns, steer, lag_ns, report_ns,
# preempt_gap_ns
CONFIG = struct.Struct("=QIIQQQQQQQQQQQQ")
# struct pyland_cgroup_bw: the value of map `cgroup_bw`, whose key is the cgroup id (u64)
CGROUP_BW_FIELDS = (
    "period_ns",
    "quota_ns",
    "burst_ns",
    "period_start",
    "used",
    "credit",
    "throttled_at",
    "nr_throttled",
    "throttled_ns",
    "nr_held",
    "usage_ns",
)
CGROUP_BW = struct.Struct("=" + "Q" * len(CGROUP_BW_FIELDS))
# ops.exit's exit_code when the BPF core stopped pyland because user space made no progress
EXIT_STALLED = 0x70796C01

# struct pyland_shared (.bss): u64 counters in this order, then struct pyland_exit_info
SHARED_COUNTERS = (
    # written by BPF
    "nr_queued",
    "nr_dispatched",
    "nr_stale",
    "nr_missing",
    "nr_bounced",
    "nr_ring_full",
    "nr_backlog",
    "nr_kthread",
    "nr_direct",
    "nr_preempt_kicks",
    "nr_drain_busy",
    "nr_usersched_runs",
    "nr_timer_kicks",
    "nr_tick_yields",
    "nr_enabled",
    "usersched_last_run_at",
    "nr_rescued",
    "rescue_scan_at",
    "nr_direct_wakes",
    "nr_wake_updates",
    "nr_quiet",
    "nr_deadline_preempts",
    "compat_missing",
    "nr_clamped",
    "nr_malformed",
    "nr_stalled",
    "nr_idle_picks",
    "nr_fair_new",
    "nr_new_direct",
    "vtime_now",
    "deadline_lead",
    "starving",
    "progress_seen",
    "progress_at",
    "nr_bw_cgroups",
    "nr_bw_held",
    "nr_bw_released",
    "nr_bw_preempted",
    "nr_bw_overdue",
    "bw_timer_at",
    "bw_release",
    "nr_grant_waits",
    "nr_yield_requeues",
    "nr_coalesced",
    "nr_steered",
    "nr_sync",
    "nr_wake_preempts",
    "nr_preempt_gated",
    "nr_preempt_other",
    "nr_weight_preempts",
    "nr_peer_preempts",
    "nr_reports",
    "nr_report_drops",
    "nr_updates",
    "nr_param_clamped",
    "nr_pref_cpu",
    "vruntime_now",
    "nr_policy_alarms",
    "policy_alarmed",
    "idle_hint",
    "nr_idle_hint_kicks",
    "nr_loop_preempts",
    "usersched_queued_at",
    "nr_watched_turns",
    "nr_irq_wakes",
    "nr_irq_preempts",
    # written by user space
    "nr_consumed",
    "nr_scheduled",
    "nr_written",
    "policy_since",
)
COUNTER_INDEX = {name: i for i, name in enumerate(SHARED_COUNTERS)}
NR_CONSUMED = COUNTER_INDEX["nr_consumed"]
NR_SCHEDULED = COUNTER_INDEX["nr_scheduled"]
NR_WRITTEN = COUNTER_INDEX["nr_written"]
POLICY_SINCE = COUNTER_INDEX["policy_since"]
PROGRESS_AT = COUNTER_INDEX["progress_at"]  # stamped by user space as its loop starts
EXIT_OFFSET = 8 * len(SHARED_COUNTERS)
# struct pyland_exit_info: kind, exit_code, reason[128], msg[1024]
EXIT_INFO = struct.Struct(f"=qq{REASON_LEN}s{MSG_LEN}s")
SHARED_SIZE = EXIT_OFFSET + EXIT_INFO.size

assert TASK.size == 144 and DECISION.size == 48 and UPDATE.size == 56 and CONFIG.size == 112
assert SHARED_SIZE == 1728
