/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the parts of pyland's BPF core share: pyland.bpf.c (the struct_ops callbacks), cgroup_bw.h
 * (cpu.max enforcement) and steer.bpf.h (steer mode). DSQ ids, the configuration and the counters
 * shared with user space, the per-task and per-CPU contexts with their maps, and the core's helpers
 * the parts call. The parts are headers of one compilation unit: pyland.bpf.c includes them all and
 * defines what is declared here without a body.
 */
#ifndef __PYLAND_COMMON_H
#define __PYLAND_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "pyland.h"
#include "compat.h"

#define MAX_CPUS		1024
#define SHARED_DSQ		MAX_CPUS
#define SCHED_DSQ		(MAX_CPUS + 1)
/* cpu.max: the cgroups charged for a task, its own and its nearest ancestors (cgroup_bw.h) */
#define BW_MAX_LEVELS		8

/* set by user space before load: the only variable in .rodata */
extern const volatile struct pyland_config cfg;
/* counters and exit info shared with user space: the only variable in .bss (offset 0) */
extern struct pyland_shared shared;
/* the migrate_disable() levels BPF's entry code adds to the task a callback runs in (.data) */
extern u16 entry_migration_depth;

struct task_ctx {
	u64 enq_cnt;		/* generation: bumped on every enqueue; decisions must echo it (R7) */
	u64 start_ts;
	u64 stop_ts;
	u64 exec_runtime;
	u64 run_ns;		/* CPU time since its last record (pyland_task.run_ns) */
	u64 record_at;		/* when its last record was reserved */
	u64 vtime;		/* vruntime from the last decision, echoed to user space */
	u64 deadline;		/* last DSQ ordering key, reused by the BPF-side fallbacks */
	u64 dsq_at;		/* when it was last inserted into a per-CPU or the shared DSQ */
	u64 slice;		/* slice of the last decision, reused by a direct wake-up */
	u64 direct_gen;		/* enq_cnt of the last enqueue BPF placed itself and told quietly */
	u64 wake_gen;		/* enq_cnt of the last wake-up (only its decision moves the grant) */
	bool direct_wake;	/* the grant: the policy's last answer to a wake-up asked for direct wake-ups */
	bool enqueued;		/* enqueued since this attachment's ops.init_task (new_direct) */
	bool bw_was_held;	/* held aside for cpu.max since its last record (told to user space) */
	bool yielded;		/* its slice was cut so that the scheduler could run (pyland_tick) */
	u32 bw_nr;		/* entries of bw_chain */
	u64 cgroup_id;		/* its cgroup (cpu controller), set at init and on every move */
	u64 bw_chain[BW_MAX_LEVELS];	/* ids of its cgroup and ancestors, nearest first */
	u64 bw_charged_exec;	/* se.sum_exec_runtime its CPU time was last charged up to */
	u64 bw_held_at;		/* when it was last held aside */
	/* steer mode */
	u64 vruntime;		/* CPU time, weighted (x 100 / weight) */
	u32 class_id;		/* its class in `classes` */
	bool own_params;	/* `params` (its own) apply, not its class's */
	bool irq_woken;		/* its pending wake-up came from an interrupt (select_cpu), not a task */
	struct pyland_params params;
	/* reported with its next record, then zeroed */
	u32 nr_wakeups;
	s32 waker;		/* pid of the task current when it was last woken (select_cpu) */
	u64 sleep_ns;
	u64 min_burst_ns;	/* shortest burst ended since its last record; 0: none */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctx_stor SEC(".maps");

struct cpu_ctx {
	u64 served_at;		/* when a dispatch here last took from (or found empty) its DSQs */
	u64 running_deadline;	/* deadline of the task running here; 0: none to preempt for */
	bool usersched_queued;	/* built-in DSQs: the scheduler waits in this CPU's local DSQ */
	bool going_idle;	/* a dispatch here found nothing to run, and nothing has run since */
	u64 rescue_scan_at;	/* last starvation scan by this CPU (see rescue_due) */
	bool starving;		/* that scan found a task that waited starve_ns */
	/* steer: the running task, for wake_preempts: its class, or its own params' preemptibility */
	u64 preempted_at;	/* when a wake-up last preempted this CPU */
	u64 running_at;		/* when the running task began to run here */
	s32 running_pid;
	u32 running_class;
	u32 running_weight;	/* its weight when it began to run (nice 0: 100) */
	bool running_own;	/* the running task has params of its own: running_preemptible applies */
	bool running_preemptible;
	bool running_loop;	/* the scheduler runs here in a gap: a wake-up may take the CPU back */
	bool loop_owed;		/* ops.dispatch ran the scheduler for work it owes (R3): not a gap */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CPUS);
	__type(key, u32);
	__type(value, struct cpu_ctx);
} cpu_ctx_stor SEC(".maps");

static __always_inline struct task_ctx *lookup_task_ctx(const struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctx_stor, (struct task_struct *)p, 0, 0);
}

static __always_inline struct cpu_ctx *lookup_cpu_ctx(s32 cpu)
{
	u32 key = cpu;

	return bpf_map_lookup_elem(&cpu_ctx_stor, &key);
}

/*
 * BPF's entry code disables migration of the task it runs in on kernels before 6.18 and, from
 * 6.18, where RCU is preemptible; elsewhere it leaves it alone. Any running task at depth 0 in
 * ops.tick proves the latter; until one is seen, 1 (Debian's kernels all disable).
 */
static __always_inline void learn_entry_migration_depth(const struct task_struct *curr)
{
	/* read before writing: a store on every tick would bounce the line between CPUs */
	if (entry_migration_depth && bpf_core_field_exists(curr->migration_disabled) &&
	    !BPF_CORE_READ(curr, migration_disabled))
		entry_migration_depth = 0;
}

/*
 * A task that may not leave its CPU (migrate_disable()); the field exists from 6.15 (CO-RE). For
 * the current task (ops.enqueue at slice expiry or preemption) the entry code's levels are ours.
 */
static __always_inline bool migration_disabled(const struct task_struct *p)
{
	u16 depth;

	if (!bpf_core_field_exists(p->migration_disabled))
		return false;
	depth = BPF_CORE_READ(p, migration_disabled);
	if ((const void *)bpf_get_current_task_btf() == (const void *)p)
		return depth > entry_migration_depth;
	return depth > 0;
}

/* the DSQ of tasks placed on `cpu`: pyland's own, or that CPU's local DSQ on built-in DSQs */
static __always_inline u64 cpu_dsq(s32 cpu)
{
	if (!pyl_custom_dsqs())
		return SCX_DSQ_LOCAL_ON | (u32)cpu;
	return (u64)cpu;
}

/* the DSQ of tasks any CPU may run */
static __always_inline u64 shared_dsq(void)
{
	return pyl_custom_dsqs() ? SHARED_DSQ : SCX_DSQ_GLOBAL;
}

/*
 * Insert with the deadline as ordering key (FIFO into built-in DSQs, which refuse vtime), stamped
 * with the time of insertion, from which the starvation rescue tells how long the task has waited.
 */
static __always_inline void insert_ordered(struct task_struct *p, struct task_ctx *tctx, u64 dsq_id, u64 slice,
					   u64 deadline, u64 now, u64 enq_flags)
{
	tctx->dsq_at = now;
	if (pyl_custom_dsqs())
		pyl_dsq_insert_vtime(p, dsq_id, slice, deadline, enq_flags);
	else
		pyl_dsq_insert(p, dsq_id, slice, enq_flags);
}

/* defined in pyland.bpf.c, used by its parts too */
static __always_inline u64 fallback_deadline(struct task_ctx *tctx);
static __always_inline void fill_record(struct pyland_task *rec, struct task_struct *p, struct task_ctx *tctx,
					u64 enq_flags, u32 kind, bool placed, u64 now);
static bool send_to_policy(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags, bool placed, u64 now);
static __always_inline bool usersched_has_pending(void);

#endif /* __PYLAND_COMMON_H */
