/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pyland: records and shared state exchanged between the BPF core and the Python loop.
 *
 * Mirrored in scxctl/pyland/records.py (Python struct formats, native alignment). Any change here
 * must change records.py too: tests/test_pyland_records.py compares both against this object's BTF.
 */
#ifndef __PYLAND_H
#define __PYLAND_H

#define PYLAND_OPS_NAME		"pyland"
#define PYLAND_CPU_ANY		(-1)	/* decision.cpu: any CPU -> shared DSQ */
#define PYLAND_DECISION_PREEMPT	1ULL	/* decision.flags: kick the target CPU (SCX_KICK_PREEMPT) so
					 * the task runs now */
#define PYLAND_DECISION_DIRECT_WAKE 2ULL /* decision.flags: BPF places the task's next wake-ups itself,
					 * at once (a latency grant; see direct_wake_allowed) */
/* pyland_task.kind: what a record asks of the policy */
#define PYLAND_REC_ENQUEUE	0	/* the task waits for its decision (decide()) */
#define PYLAND_REC_REPORT	1	/* steer mode: what the task did since its last record (observe()) */
/* pyland_params.flags */
#define PYLAND_PARAM_SYNC	1	/* its wake-ups wait for the policy's decision (a round trip) */
#define PYLAND_PARAM_CPU	2	/* pyland_params.cpu is its preferred CPU */
#define PYLAND_PARAM_FIFO	4	/* arrival order: its deadline is vruntime_now, not its own vruntime */
#define PYLAND_PARAM_PREEMPTIBLE 8	/* a wake-up with an earlier deadline may preempt it */
#define PYLAND_PARAM_FLAGS	(PYLAND_PARAM_SYNC | PYLAND_PARAM_CPU | PYLAND_PARAM_FIFO | PYLAND_PARAM_PREEMPTIBLE)
#define PYLAND_NR_CLASSES	64	/* classes a policy can define (class 0: every task not told otherwise) */
#define PYLAND_COMM_LEN		16
#define PYLAND_REASON_LEN	128
#define PYLAND_MSG_LEN		1024
/* ops.exit's exit_code when the BPF core itself stopped pyland because user space made no progress */
#define PYLAND_EXIT_STALLED	0x70796c01LL

/* `queued` and `reports` ring buffer record (kernel -> user); 144 bytes */
struct pyland_task {
	__s32 pid;
	__s32 cpu;		/* previous CPU */
	__u32 nr_cpus_allowed;
	__u32 flags;		/* SCX enqueue flags, low 32 bits (SCX_ENQ_WAKEUP = 1) */
	__u64 start_ts;		/* last time the task started running (ns) */
	__u64 stop_ts;		/* last time the task stopped running (ns) */
	__u64 exec_runtime;	/* ns of CPU time since the task last slept */
	__u32 weight;		/* 1..10000, 100 = nice 0 */
	__u32 placed;		/* 1: BPF placed the task already (a direct wake-up, a first enqueue):
				 * the decision only updates its vtime and grant */
	__u64 vtime;		/* vruntime last returned by user space, 0 for a new task */
	__u64 enq_cnt;		/* generation of this enqueue */
	char comm[PYLAND_COMM_LEN];
	__u64 cgroup_id;	/* the task's cgroup (cpu controller), its inode number; 0: unknown */
	__u64 throttled;	/* 1: held aside since its last record, its cgroup out of cpu.max quota */
	__u64 run_ns;		/* CPU time since its previous record: every run segment, also those
				 * of enqueues that sent none (see nr_coalesced) */
	__u32 kind;		/* PYLAND_REC_* */
	__u32 nr_wakeups;	/* wake-ups since its previous record */
	__s32 waker;		/* pid of the task that woke it last (0: none seen: a timer, an IRQ) */
	__u32 class_id;		/* its class (steer mode) */
	__u64 deadline;		/* steer mode: the deadline BPF ordered this enqueue by; 0 otherwise */
	__u64 sleep_ns;		/* time it slept since its previous record */
	__u64 min_burst_ns;	/* its shortest burst (CPU time from a wake-up to the next sleep)
				 * that ended since its previous record; 0: none ended */
};

/*
 * How BPF places a task in steer mode, set by the policy per task or per class (map `classes`).
 * All zero is "nothing special": the BPF slice, the task's own weight, no offset, any CPU.
 */
struct pyland_params {
	__u64 slice_ns;		/* its slice, and the request in its deadline (shorter: sooner); 0: default */
	__s64 lag_ns;		/* added to its deadline: negative runs sooner, positive later */
	__u32 weight;		/* 1..10000 (100 = nice 0); 0: the task's own, from its nice value */
	__s32 cpu;		/* its preferred CPU, with PYLAND_PARAM_CPU */
	__u32 flags;		/* PYLAND_PARAM_* */
	__u32 pad;
};

/*
 * Steer mode's answer (user -> kernel, the `dispatched` ring beside the decisions, told apart by
 * size): the parameters of one task (pid > 0), or of class `class_id` (pid 0).
 */
struct pyland_update {
	__s32 pid;
	__u32 class_id;		/* the task's class, whose params apply to it unless `own` */
	__u32 own;		/* 1: `params` are the task's own */
	__u32 pad;
	__u64 sent_at;		/* CLOCK_MONOTONIC ns when the policy wrote it */
	struct pyland_params params;
};

/* dispatched user ring buffer record (user -> kernel): one decision per task; 48 bytes */
struct pyland_decision {
	__s32 pid;
	__s32 cpu;		/* target CPU or PYLAND_CPU_ANY */
	__u64 flags;		/* PYLAND_DECISION_PREEMPT | PYLAND_DECISION_DIRECT_WAKE */
	__u64 slice_ns;		/* 0 -> BPF default slice */
	__u64 deadline;		/* ordering key in the DSQ (vtime insert) */
	__u64 vtime;		/* the task's new vruntime, echoed in its next pyland_task.vtime */
	__u64 enq_cnt;		/* echo of pyland_task.enq_cnt; a stale generation is dropped */
};

/*
 * Kernel facilities pyland can run without, for kernels that cannot provide them (compat.h says
 * which and why). ops.init records the missing ones in pyland_shared.compat_missing.
 */
enum pyland_compat {
	PYLAND_NO_SELECT_CPU_DFL	= 1 << 0,	/* no idle-CPU pick at wake-up: tasks stay put */
	PYLAND_NO_PICK_IDLE_CPU		= 1 << 1,	/* the heartbeat preempts the scheduler's CPU */
	PYLAND_NO_DISPATCH_SLOTS	= 1 << 2,	/* decisions drained in batches of the default size */
	PYLAND_NO_CUSTOM_DSQS		= 1 << 3,	/* built-in FIFO DSQs: local per CPU, global shared */
	PYLAND_NO_KICK			= 1 << 4,	/* no kicks: the kernel's own idle wake-ups only */
	PYLAND_NO_DSQ_ITER		= 1 << 5,	/* no rescue scan; built-in FIFO DSQs as above */
	PYLAND_NO_ERROR_REPORT		= 1 << 6,	/* scheduler errors fall back instead of ejecting */
	PYLAND_NO_NR_QUEUED		= 1 << 7,	/* DSQ lengths unknown: "someone may wait" */
	PYLAND_NO_CGROUP_BW		= 1 << 8,	/* cpu.max is not enforced (no bandwidth hooks) */
};

/*
 * cpu.max of one cgroup as pyland enforces it (map `cgroup_bw`, key: the cgroup's id). Only
 * cgroups with a quota are in the map. Times in ns, on the clock of bpf_ktime_get_ns().
 */
struct pyland_cgroup_bw {
	__u64 period_ns;
	__u64 quota_ns;
	__u64 burst_ns;
	__u64 period_start;	/* when the current period began */
	__u64 used;		/* CPU time charged in this period, plus debt carried from the last */
	__u64 credit;		/* unused quota carried forward, at most burst_ns */
	__u64 throttled_at;	/* when it ran out of budget in this period; 0: it has not */
	__u64 nr_throttled;	/* periods in which it ran out */
	__u64 throttled_ns;	/* time spent throttled, summed at each period's end */
	__u64 nr_held;		/* tasks held aside because of it */
	__u64 usage_ns;		/* CPU time charged, in total */
};

/* read-only configuration (.rodata), written by user space before load */
struct pyland_config {
	__u64 slice_ns;		/* BPF default/refill slice (3 ms); NOT the 20 ms user-space budget */
	__u32 usersched_tgid;	/* the scheduler process: all its threads go to SCHED_DSQ */
	__u32 builtin_idle;	/* 1: select_cpu picks an idle CPU and dispatches there directly */
	__u64 timer_ns;		/* heartbeat period of the watchdog-keeping timer */
	__u64 max_backlog;	/* records user space may be behind before BPF schedules new ones itself */
	__u64 starve_ns;	/* a task waiting this long in a DSQ is run next, whatever its deadline */
	__u64 direct_wake_ns;	/* 0: off; else direct wake-ups of latency-critical tasks, allowed on
				 * a CPU whose ops.dispatch served its DSQs within this window */
	__u64 max_slice_ns;	/* a decision's slice is clamped to this (the user-space budget) */
	__u64 stall_ns;		/* policy budget: 0 off; else past it new tasks bypass the policy, and
				 * pending work without progress for PROGRESS_BUDGETS of it stops pyland */
	__u64 new_direct;	/* 1: a task's first enqueue is placed by BPF, the policy told quietly */
	__u64 bw_max_hold_ns;	/* cpu.max: a task held this long is released, throttled or not */
	__u64 steer;		/* 1: BPF places every enqueue from the policy's parameters (steer
				 * mode); 0: every enqueue waits for decide() (round-trip mode) */
	__u64 lag_ns;		/* steer: the sleep credit a waking task may bring, in vruntime */
	__u64 report_ns;	/* steer: a task reports what it did at most this often */
	__u64 preempt_gap_ns;	/* steer: a CPU is preempted for a wake-up at most this often; 0: never */
};

/* why the scheduler left, copied from struct scx_exit_info in ops.exit */
struct pyland_exit_info {
	__s64 kind;		/* enum scx_exit_kind; 0 while attached */
	__s64 exit_code;
	char reason[PYLAND_REASON_LEN];
	char msg[PYLAND_MSG_LEN];
};

/*
 * Shared state (.bss, mmap'ed by user space). Every field has exactly ONE writer: Python cannot do
 * atomic read-modify-write on shared memory, so the counters user space owns are plain stores.
 */
struct pyland_shared {
	/* written by BPF */
	__u64 nr_queued;		/* records submitted to `queued` (incremented BEFORE submit) */
	__u64 nr_dispatched;		/* decisions applied (inserted into a DSQ) */
	__u64 nr_stale;			/* decisions dropped: enq_cnt older than the task's generation */
	__u64 nr_missing;		/* decisions dropped: the task exited */
	__u64 nr_bounced;		/* decisions whose CPU the task may not use -> shared DSQ */
	__u64 nr_ring_full;		/* `queued` full -> task inserted into the shared DSQ by BPF */
	__u64 nr_backlog;		/* user space max_backlog records behind -> same fallback */
	__u64 nr_kthread;		/* kthreads (per-CPU, unbound, kswapd, kcompactd...) run directly */
	__u64 nr_direct;		/* builtin_idle: dispatched to an idle CPU from select_cpu */
	__u64 nr_preempt_kicks;		/* decisions with PREEMPT that kicked their CPU */
	__u64 nr_drain_busy;		/* drain found another CPU draining (it drains for us) */
	__u64 nr_usersched_runs;	/* times the scheduler task got a CPU */
	__u64 nr_timer_kicks;		/* heartbeat timer found pending work and kicked a CPU */
	__u64 nr_tick_yields;		/* tick made a task yield so the waiting scheduler could run */
	__u64 nr_enabled;		/* tasks currently in the sched_ext class under pyland */
	__u64 usersched_last_run_at;	/* ns, scx_bpf_now() when the scheduler last started */
	__u64 nr_rescued;		/* tasks run out of deadline order because they waited starve_ns */
	__u64 rescue_scan_at;		/* ns, the last starvation scan by any CPU (each has its own period) */
	__u64 nr_direct_wakes;		/* wake-ups placed by BPF under the policy's latency grant */
	__u64 nr_wake_updates;		/* decisions for those wake-ups: grant/vtime updated, not placed */
	__u64 nr_quiet;			/* records of direct wake-ups, submitted without waking user space */
	__u64 nr_deadline_preempts;	/* decisions whose deadline preempted the running task */
	__u64 compat_missing;		/* PYLAND_NO_* bits: what this kernel cannot give (set in ops.init) */
	__u64 nr_clamped;		/* decisions whose slice exceeded max_slice_ns */
	__u64 nr_malformed;		/* decision records of the wrong size, or with an impossible CPU */
	__u64 nr_stalled;		/* tasks BPF placed itself because the policy overran stall_ns */
	__u64 nr_idle_picks;		/* PYLAND_CPU_ANY decisions sent to an idle CPU */
	__u64 nr_fair_new;		/* fallbacks of new tasks, placed behind the running deadlines */
	__u64 nr_new_direct;		/* first enqueues placed by BPF (new_direct) */
	__u64 vtime_now;		/* the latest deadline that got a CPU */
	__u64 deadline_lead;		/* how far past vtime_now the policy places a task (average) */
	__u64 starving;			/* 1 while the last scan, by any CPU, found a task that waited starve_ns */
	__u64 progress_seen;		/* heartbeat: nr_consumed when it last moved */
	__u64 progress_at;		/* heartbeat: ns (CLOCK_MONOTONIC) when it last moved; 0 until the loop starts */
	__u64 nr_bw_cgroups;		/* cgroups with a cpu.max quota (entries of `cgroup_bw`) */
	__u64 nr_bw_held;		/* tasks held aside: a cgroup of theirs was out of quota */
	__u64 nr_bw_released;		/* held tasks put back once their cgroups had budget again */
	__u64 nr_bw_preempted;		/* running tasks stopped at the tick: their cgroup ran out */
	__u64 nr_bw_overdue;		/* held tasks released still throttled, before the watchdog */
	__u64 bw_timer_at;		/* when the release timer fires next; 0: not armed */
	__u64 bw_release;		/* 1: the timer asks ops.dispatch to look at the held tasks */
	__u64 nr_grant_waits;		/* granted wake-ups sent to the policy: their CPU's DSQs waited */
	__u64 nr_yield_requeues;	/* tasks whose slice was cut for the scheduler, placed again by BPF */
	__u64 nr_coalesced;		/* placed tasks sent no record: their last one is under a budget old */
	__u64 nr_steered;		/* steer: enqueues BPF placed from the policy's parameters */
	__u64 nr_sync;			/* steer: wake-ups sent to decide() because their params ask for it */
	__u64 nr_wake_preempts;		/* steer: wake-ups that preempted a later deadline (SCX_ENQ_PREEMPT) */
	__u64 nr_preempt_gated;		/* steer: preemptions refused: the CPU was preempted under a gap ago */
	__u64 nr_preempt_other;		/* steer: of nr_wake_preempts, those of a CPU not the task's own */
	__u64 nr_weight_preempts;	/* steer: of nr_wake_preempts, those of a lighter task (weight) */
	__u64 nr_peer_preempts;		/* steer: of nr_wake_preempts, of a preemptible task by another */
	__u64 nr_reports;		/* steer: records submitted to `reports` */
	__u64 nr_report_drops;		/* steer: reports lost to a full `reports` ring */
	__u64 nr_updates;		/* steer: parameter updates applied */
	__u64 nr_param_clamped;		/* steer: updates with a value out of range, clamped */
	__u64 nr_pref_cpu;		/* steer: wake-ups placed on their idle preferred CPU */
	__u64 vruntime_now;		/* steer: the scale's now: every task's charged run, added up */
	__u64 nr_policy_alarms;		/* heartbeat: policy calls past half the budget, told to the watchdog */
	__u64 policy_alarmed;		/* heartbeat: the policy_since of the last call it told of */
	__u64 idle_hint;		/* the CPU whose dispatch last found nothing to run */
	__u64 nr_idle_hint_kicks;	/* steer: inserts that kicked a CPU on its way to idle */
	__u64 nr_loop_preempts;		/* steer: of nr_wake_preempts, of the scheduler's turn in a gap */
	__u64 usersched_queued_at;	/* ns, scx_bpf_now() when the scheduler last waited for a CPU */
	__u64 nr_watched_turns;		/* scheduler turns given first: its watchdog was timing a call */
	__u64 nr_irq_wakes;		/* steer: wake-ups select_cpu saw come from an interrupt, not a task */
	__u64 nr_irq_preempts;		/* steer: of nr_wake_preempts, of a task only an interrupt's may preempt */
	/* written by user space */
	__u64 nr_consumed;		/* records read from `queued` */
	__u64 nr_scheduled;		/* tasks read but whose decision is not yet written (the pool) */
	__u64 nr_written;		/* decisions written to `dispatched` */
	__u64 policy_since;		/* CLOCK_MONOTONIC ns the loop entered the policy's code; 0 outside */
	/* written once by ops.exit */
	struct pyland_exit_info exit;
};

#endif /* __PYLAND_H */
