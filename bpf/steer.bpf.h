/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Steer mode, a part of pyland's BPF core: it uses only what pyland_common.h declares, and
 * pyland.bpf.c calls it from its callbacks.
 *
 * The policy steers, BPF carries out. The policy sets parameters per task or per class (struct
 * pyland_params, through pyland_update records); BPF applies them on every wake-up and enqueue
 * without waiting:
 *
 *   vruntime   CPU time x 100 / weight, charged in ops.stopping, to the task and to vruntime_now
 *   deadline   vruntime + (time awake + slice) x 100 / weight + the policy's offset; the vruntime is
 *              first raised to at most lag_ns behind vruntime_now, so sleeping (or waiting) buys
 *              bounded credit, and time awake (capped at lag_ns) puts a CPU hog behind a task that
 *              has just woken
 *   placement  an idle CPU in select_cpu (the preferred one first), else the per-CPU (pinned) or
 *              shared DSQ in deadline order, and a waking task that is not preemptible preempts a
 *              running task the policy made preemptible when its deadline is earlier; one an
 *              interrupt woke may preempt any (wake_preempts)
 *
 * Only the wake-ups of tasks whose parameters say PYLAND_PARAM_SYNC wait for decide(). What tasks
 * do goes to the policy in the `reports` ring, at most once per report_ns per task, without waking
 * the loop: it reads them at its own pace.
 */
#ifndef __PYLAND_STEER_BPF_H
#define __PYLAND_STEER_BPF_H

#include "pyland_common.h"

#define NICE0_WEIGHT		100
#define MAX_WEIGHT		10000
#define MIN_PARAM_SLICE_NS	(50ULL * 1000)		/* a shorter slice would mostly be switch cost */
#define MAX_PARAM_LAG_NS	(1000LL * 1000 * 1000)	/* offsets beyond 1 s only starve or rescue */

/* steer mode: what tasks did, for observe(); read at the loop's pace, never waking it */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} reports SEC(".maps");

/* steer mode: the parameters of each class the policy defined (pyland_update with pid 0) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PYLAND_NR_CLASSES);
	__type(key, u32);
	__type(value, struct pyland_params);
} classes SEC(".maps");

/* the task's parameters: its own, or its class's; NULL only if the class map failed (defaults) */
static __always_inline const struct pyland_params *task_params(struct task_ctx *tctx)
{
	u32 key = tctx->class_id;

	if (tctx->own_params)
		return &tctx->params;
	return bpf_map_lookup_elem(&classes, &key);
}

static __always_inline u64 params_weight(const struct pyland_params *pp, const struct task_struct *p)
{
	if (pp && pp->weight)
		return pp->weight;
	return p->scx.weight ?: NICE0_WEIGHT;
}

static __always_inline u64 params_slice(const struct pyland_params *pp)
{
	return pp && pp->slice_ns ? pp->slice_ns : cfg.slice_ns;
}

/*
 * The deadline the DSQs order the task by. The floor on vruntime bounds lag: a task that slept (or
 * waited) long comes back lag_ns behind now, not as far behind as it was. Time awake, the CPU time
 * since it last woke (capped at lag_ns), is what tells a CPU hog from a task that has just woken:
 * with it a wake-up's deadline beats the running hog's and may preempt it (wake_preempts).
 * Signed differences: the values wrap, and vruntime_now starts at 0.
 */
static __always_inline u64 steer_deadline(struct task_struct *p, struct task_ctx *tctx,
					  const struct pyland_params *pp)
{
	u64 floor = shared.vruntime_now - cfg.lag_ns, start, deadline;
	u64 awake = tctx->exec_runtime < cfg.lag_ns ? tctx->exec_runtime : cfg.lag_ns;

	if ((s64)(tctx->vruntime - floor) < 0)
		tctx->vruntime = floor;
	/* FIFO: queued as of now on the vruntime scale, so arrivals keep their order */
	start = pp && (pp->flags & PYLAND_PARAM_FIFO) ? shared.vruntime_now : tctx->vruntime;
	deadline = start + (awake + params_slice(pp)) * NICE0_WEIGHT / params_weight(pp, p) +
		   (pp ? pp->lag_ns : 0);
	return deadline ?: 1;	/* 0 tells decide() "round-trip mode" (pyland_task.deadline) */
}

/*
 * ops.stopping: the run is charged to the task's vruntime and to vruntime_now alike, so "now" moves
 * with every task's service: a task left waiting falls behind it, and at its next enqueue the floor
 * (lag_ns behind now) brings its deadline up to the tasks arriving then. A "now" that moved only
 * with the running tasks' own vruntime would stand still while many short sleepers run below it.
 */
static __always_inline void steer_charge(struct task_struct *p, struct task_ctx *tctx, u64 ran_ns)
{
	u64 charge = ran_ns * NICE0_WEIGHT / params_weight(task_params(tctx), p);

	tctx->vruntime += charge;
	__sync_fetch_and_add(&shared.vruntime_now, charge);
}

/* what wake_preempts needs to know of the task running on a CPU: its class, or its own params */
static __always_inline void note_running(struct cpu_ctx *cctx, struct task_struct *p, struct task_ctx *tctx)
{
	cctx->running_at = tctx->start_ts;
	cctx->running_pid = p->pid;
	cctx->running_class = tctx->class_id;
	cctx->running_own = tctx->own_params;
	cctx->running_preemptible = tctx->own_params && (tctx->params.flags & PYLAND_PARAM_PREEMPTIBLE);
	cctx->running_weight = params_weight(task_params(tctx), p);
}

/*
 * May a wake-up preempt the task running there? Its class's params are read now, not when it began
 * to run: a task alone on its CPU never stops (dispatch extends its slice), and a CPU hog the
 * policy moved to a preemptible class while it ran would otherwise keep its CPU until it blocked.
 */
static __always_inline bool running_preemptible(const struct cpu_ctx *cctx)
{
	const struct pyland_params *pp;
	u32 key = cctx->running_class;

	if (cctx->running_own)
		return cctx->running_preemptible;
	pp = bpf_map_lookup_elem(&classes, &key);
	return pp && (pp->flags & PYLAND_PARAM_PREEMPTIBLE);
}

/* ops.running: what wake_preempts reads of the task now running */
static __always_inline void steer_running(struct task_struct *p, struct task_ctx *tctx, struct cpu_ctx *cctx)
{
	if (cctx)
		note_running(cctx, p, tctx);
}

/* the preferred CPU, claimed, if it is idle and the task may run there; -1 otherwise */
static __always_inline s32 preferred_idle_cpu(struct task_struct *p, const struct pyland_params *pp)
{
	s32 cpu;

	if (!pp || !(pp->flags & PYLAND_PARAM_CPU))
		return -1;
	cpu = pp->cpu;
	if (cpu < 0 || cpu >= MAX_CPUS || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr) || !pyl_claim_idle_cpu(cpu))
		return -1;
	return cpu;
}

/*
 * ops.select_cpu, for every waking task: did an interrupt (a timer, a device) wake it, or a task?
 * Asked here because select_cpu runs in the waker's context; ops.enqueue may run on the wakee's
 * CPU, in the interrupt that delivers a queued remote wake-up, whoever the waker was.
 */
static __always_inline void steer_note_waker(struct task_ctx *tctx)
{
	tctx->irq_woken = pyl_in_interrupt();
	if (tctx->irq_woken)
		__sync_fetch_and_add(&shared.nr_irq_wakes, 1);
}

/* ops.select_cpu: an idle CPU, the preferred one first, gets the waking task at once */
static __always_inline s32 steer_select_cpu(struct task_struct *p, struct task_ctx *tctx, s32 prev_cpu,
					    u64 wake_flags)
{
	const struct pyland_params *pp = task_params(tctx);
	bool is_idle = false;
	s32 cpu = preferred_idle_cpu(p, pp);

	if (cpu >= 0) {
		is_idle = true;
		__sync_fetch_and_add(&shared.nr_pref_cpu, 1);
	} else {
		cpu = pyl_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	}
	if (is_idle) {
		tctx->irq_woken = false;	/* placed here: no ops.enqueue follows to read it */
		/* a wake-up: awake from now on (ops.runnable, which says so too, comes after this) */
		tctx->exec_runtime = 0;
		tctx->deadline = steer_deadline(p, tctx, pp);	/* what a wake-up must beat to preempt it */
		pyl_dsq_insert(p, SCX_DSQ_LOCAL, params_slice(pp), 0);
		__sync_fetch_and_add(&shared.nr_direct, 1);
	}
	return cpu;
}

/*
 * Does the scheduler's turn running on this CPU yield to a wake-up? Only a turn it took in a gap
 * (running_loop: the CPU had nothing else to run), and only while it owes no decision: its turns
 * take milliseconds of Python, and a wake-up must not wait them out. A turn ops.dispatch owed it
 * (work, or reports a period old) is never cut, so it always makes progress. Not gated like the
 * other preemptions: a wake-up gated here would wait out the rest of the turn, and no storm can
 * come of it, since each one ends a turn that began when a CPU had nothing else to run.
 */
static __always_inline bool loop_yields(const struct cpu_ctx *cctx)
{
	if (!cctx->running_loop || usersched_has_pending())
		return false;
	__sync_fetch_and_add(&shared.nr_wake_preempts, 1);
	__sync_fetch_and_add(&shared.nr_loop_preempts, 1);
	return true;
}

/*
 * Does the waking task preempt the task running on `cpu`? The scheduler's turn in a gap, always
 * (loop_yields); else only one with a later deadline (kernel threads and idle CPUs have none:
 * running_deadline 0), and only when
 * - the running task is one the policy made preemptible (a CPU hog) and the waking one is not:
 *   a preemption then always hands a hog's CPU to a task that is never preempted in turn, so no
 *   chain of wakers preempts each other (a preemption storm), and no more preemptions happen than
 *   the hog gets its CPU back; or
 * - both are preemptible (two workers that alternate short replies and long requests) and the
 *   running one's deadline, moved on by what it has run since it began, is the later: without it
 *   a worker woken to reply waits out its peer's whole slice. The preempted task does not preempt
 *   back (only wake-ups do), and as it runs a task's deadline only moves away; or
 * - the running task is lighter (a smaller weight, a higher nice): whatever their classes, a
 *   niced background job must not hold a CPU for a slice against a wake-up of normal weight.
 *   Each such preemption hands the CPU to a strictly heavier task, so these cannot chain back; or
 * - an interrupt woke it (`irq`: a timer, a device), whatever the running task's class, whose
 *   deadline moves on as a peer's does. No task woke it, so it is no link in a chain of wakers:
 *   without it a task a timer wakes waits out a whole slice of a task never preempted otherwise.
 * And at most one per preempt_gap_ns on a CPU, which bounds what any storm could cost.
 */
static __always_inline bool wake_preempts(struct task_struct *p, struct task_ctx *tctx,
					  const struct pyland_params *pp, s32 cpu, bool irq, u64 now)
{
	struct cpu_ctx *cctx;
	u64 running_deadline;
	bool lighter, peer, by_irq;

	if (!cfg.preempt_gap_ns || cpu < 0 || cpu >= MAX_CPUS || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
		return false;
	cctx = lookup_cpu_ctx(cpu);
	if (!cctx)
		return false;
	if (loop_yields(cctx))
		return true;
	if (!cctx->running_deadline)
		return false;
	running_deadline = cctx->running_deadline;
	lighter = cctx->running_weight < params_weight(pp, p);
	by_irq = !lighter && !running_preemptible(cctx);
	if (by_irq && !irq)
		return false;
	peer = !lighter && !by_irq && pp && (pp->flags & PYLAND_PARAM_PREEMPTIBLE);
	if (peer || by_irq)	/* scaled as steer_charge() charges it (params_weight() is never 0) */
		running_deadline += pyl_elapsed(now, cctx->running_at) * NICE0_WEIGHT /
				    (cctx->running_weight ?: NICE0_WEIGHT);
	if ((s64)(tctx->deadline - running_deadline) >= 0)
		return false;
	if (pyl_elapsed(now, cctx->preempted_at) < cfg.preempt_gap_ns) {
		__sync_fetch_and_add(&shared.nr_preempt_gated, 1);
		return false;
	}
	cctx->preempted_at = now;
	__sync_fetch_and_add(&shared.nr_wake_preempts, 1);
	if (lighter)
		__sync_fetch_and_add(&shared.nr_weight_preempts, 1);
	else if (by_irq)
		__sync_fetch_and_add(&shared.nr_irq_preempts, 1);
	else if (peer)
		__sync_fetch_and_add(&shared.nr_peer_preempts, 1);
	return true;
}

/*
 * The CPU on its way to idle (note_going_idle) if the task may run there, else -1. A kick with
 * SCX_KICK_IDLE only reschedules a CPU that is idle when the kick is delivered: a CPU that found
 * work meanwhile is left alone, so a stale mark costs an irq_work and nothing more.
 */
static __always_inline s32 going_idle_cpu(struct task_struct *p)
{
	s32 cpu = shared.idle_hint;
	struct cpu_ctx *cctx;

	if (cpu < 0 || cpu >= MAX_CPUS || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
		return -1;
	cctx = lookup_cpu_ctx(cpu);
	return cctx && cctx->going_idle ? cpu : -1;
}

/* a DSQ insert nobody may notice: wake an idle CPU that can take it (no kicks: the kernel's own) */
static __always_inline void kick_for(struct task_struct *p, s32 cpu, bool pinned)
{
	s32 idle;

	if (!pyl_can_kick())
		return;
	if (pinned) {
		pyl_kick_cpu(cpu, SCX_KICK_IDLE);
		return;
	}
	idle = pyl_pick_idle_cpu(p->cpus_ptr, 0);
	if (idle < 0 && (idle = going_idle_cpu(p)) >= 0)
		__sync_fetch_and_add(&shared.nr_idle_hint_kicks, 1);
	if (idle >= 0)
		pyl_kick_cpu(idle, SCX_KICK_IDLE);
}

/*
 * The CPU a wake-up preempts, or -1: its own CPU, else one other CPU it may run on, picked at
 * random. Without the second try, two periodic wakers that once met on a hog's CPU stay there:
 * the one that wakes while the other runs, or within a gap of the other's preemption, waits out
 * the hog's slice, while the hog on the next CPU could have been preempted. One random CPU, not a
 * scan: the cost of a wake-up must not grow with the machine.
 */
static __always_inline s32 wake_target(struct task_struct *p, struct task_ctx *tctx,
				       const struct pyland_params *pp, s32 cpu, bool pinned, bool irq, u64 now)
{
	u32 nr_cpus = scx_bpf_nr_cpu_ids();
	s32 other;

	if (wake_preempts(p, tctx, pp, cpu, irq, now))
		return cpu;
	if (pinned || nr_cpus < 2 || cpu < 0)
		return -1;
	other = (cpu + 1 + bpf_get_prandom_u32() % (nr_cpus - 1)) % nr_cpus;
	if (!wake_preempts(p, tctx, pp, other, irq, now))
		return -1;
	__sync_fetch_and_add(&shared.nr_preempt_other, 1);
	return other;
}

/*
 * The task into its CPU's DSQ (pinned) or the shared one, in deadline order, its slice from its
 * params; a wake-up that preempts goes first into the local DSQ of the CPU it preempts.
 */
static void steer_place(struct task_struct *p, struct task_ctx *tctx, const struct pyland_params *pp,
			u64 enq_flags, bool irq, u64 now)
{
	s32 cpu = scx_bpf_task_cpu(p);
	bool pinned = p->nr_cpus_allowed == 1 || migration_disabled(p);
	u64 slice = params_slice(pp);
	s32 target = -1;

	__sync_fetch_and_add(&shared.nr_steered, 1);
	if (enq_flags & SCX_ENQ_WAKEUP)
		target = wake_target(p, tctx, pp, cpu, pinned, irq, now);
	if (target < 0) {
		insert_ordered(p, tctx, pinned ? cpu_dsq(cpu) : shared_dsq(), slice, tctx->deadline, now,
			       enq_flags);
		kick_for(p, cpu, pinned);
		return;
	}
	/*
	 * First in the local DSQ of the CPU it preempts, which the kernel reschedules at once (a
	 * reschedule IPI when remote): no kick through irq_work, and no ops.dispatch before it runs.
	 * It may pass tasks of earlier deadline waiting in the DSQs, once per preempt_gap_ns at most.
	 */
	pyl_dsq_insert(p, SCX_DSQ_LOCAL_ON | target, slice, enq_flags | SCX_ENQ_HEAD | SCX_ENQ_PREEMPT);
}

/* ops.enqueue in steer mode: placed at once, unless its params send its wake-ups to decide() */
static void steer_enqueue(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags)
{
	const struct pyland_params *pp = task_params(tctx);
	bool irq = tctx->irq_woken;
	u64 now = pyl_now();

	tctx->irq_woken = false;	/* this wake-up's: a pinned task's next one skips select_cpu */
	tctx->deadline = steer_deadline(p, tctx, pp);
	if ((enq_flags & SCX_ENQ_WAKEUP) && pp && (pp->flags & PYLAND_PARAM_SYNC)) {
		__sync_fetch_and_add(&shared.nr_sync, 1);
		/* the record carries the deadline: decide() may keep it, on the scale of every other */
		if (send_to_policy(p, tctx, enq_flags, false, now))
			return;
	}
	steer_place(p, tctx, pp, enq_flags, irq, now);
}

static __always_inline bool steer_report_due(const struct task_ctx *tctx, u64 now)
{
	return pyl_elapsed(now, tctx->record_at) >= cfg.report_ns;
}

/*
 * What the task did since its last record, for observe(): at most once per report_ns (its callers,
 * ops.stopping and ops.tick, test steer_report_due first: a task that never stops still reports).
 * Submitted without waking the loop, and not counted as work for it: a report must never cut a
 * running task's slice.
 */
static void steer_report(struct task_struct *p, struct task_ctx *tctx, u64 now)
{
	struct pyland_task *rec;

	rec = bpf_ringbuf_reserve(&reports, sizeof(*rec), 0);
	if (!rec) {
		tctx->record_at = now;	/* the counters go on: the next report carries them */
		__sync_fetch_and_add(&shared.nr_report_drops, 1);
		return;
	}
	fill_record(rec, p, tctx, 0, PYLAND_REC_REPORT, true, now);
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	__sync_fetch_and_add(&shared.nr_reports, 1);
}

/*
 * Reports wait and the loop has waited a report period for a CPU: it gets a turn as if it had work.
 * Reports are no work for it otherwise (they must not cut slices), and under CPU hogs on every CPU
 * the loop would then run only when a CPU idles: the policy would never learn, and the kernel's
 * watchdog would eject pyland for its own waiting thread. Counted from when it began to wait, not
 * from its last run: a loop that slept a period is not late, and its turn is taken in the next
 * gap, where a wake-up may cut it (wake_preempts); the tick cuts a slice for it only when no gap
 * came within the period.
 */
static __always_inline bool reports_due(u64 now)
{
	return cfg.steer && pyl_elapsed(now, shared.usersched_queued_at) >= cfg.report_ns &&
	       bpf_ringbuf_query(&reports, BPF_RB_AVAIL_DATA) > 0;
}

/*
 * An update's parameters brought into range; 1 when something had to be. A global function: the
 * verifier checks it once, on its own. Inlined into the drain callback, each of its branches would
 * double the paths the verifier walks through the callback's iterations.
 */
__noinline int clamp_params(struct pyland_params *pp, s32 nr_cpus)
{
	int clamped = 0;

	if (!pp)
		return 0;
	if (pp->slice_ns && pp->slice_ns < MIN_PARAM_SLICE_NS) {
		pp->slice_ns = MIN_PARAM_SLICE_NS;
		clamped = 1;
	} else if (pp->slice_ns > cfg.max_slice_ns) {
		pp->slice_ns = cfg.max_slice_ns;
		clamped = 1;
	}
	if (pp->weight > MAX_WEIGHT) {
		pp->weight = MAX_WEIGHT;
		clamped = 1;
	}
	if (pp->lag_ns > MAX_PARAM_LAG_NS || pp->lag_ns < -MAX_PARAM_LAG_NS) {
		pp->lag_ns = pp->lag_ns > 0 ? MAX_PARAM_LAG_NS : -MAX_PARAM_LAG_NS;
		clamped = 1;
	}
	if ((pp->flags & PYLAND_PARAM_CPU) && (pp->cpu < 0 || pp->cpu >= nr_cpus)) {
		pp->flags &= ~PYLAND_PARAM_CPU;
		clamped = 1;
	}
	if (pp->flags & ~PYLAND_PARAM_FLAGS) {
		pp->flags &= PYLAND_PARAM_FLAGS;
		clamped = 1;
	}
	return clamped;
}

/*
 * Apply one pyland_update (from the drain in ops.dispatch). Readers on other CPUs may see a class's
 * or a task's parameters half written for one enqueue: each value is valid on its own, so that
 * enqueue is only placed by a mix of the old and the new.
 */
static void apply_update(const struct pyland_update *u)
{
	struct pyland_params params = u->params;
	bool clamped = clamp_params(&params, scx_bpf_nr_cpu_ids());
	u32 class_id = u->class_id;
	struct pyland_params *cls;
	struct task_struct *p;
	struct task_ctx *tctx;

	if (class_id >= PYLAND_NR_CLASSES) {
		class_id = 0;
		clamped = true;
	}
	if (clamped)
		__sync_fetch_and_add(&shared.nr_param_clamped, 1);
	if (u->pid == 0) {
		cls = bpf_map_lookup_elem(&classes, &class_id);
		if (cls)
			*cls = params;
		__sync_fetch_and_add(&shared.nr_updates, 1);
		return;
	}
	p = bpf_task_from_pid(u->pid);
	if (!p) {
		__sync_fetch_and_add(&shared.nr_missing, 1);
		return;
	}
	tctx = lookup_task_ctx(p);
	if (tctx) {
		struct cpu_ctx *cctx = lookup_cpu_ctx(scx_bpf_task_cpu(p));

		tctx->class_id = class_id;
		tctx->own_params = u->own;
		if (u->own)
			tctx->params = params;
		if (cctx && cctx->running_pid == p->pid)	/* it runs now: its CPU follows */
			note_running(cctx, p, tctx);
		__sync_fetch_and_add(&shared.nr_updates, 1);
	}
	bpf_task_release(p);
}

#endif /* __PYLAND_STEER_BPF_H */
