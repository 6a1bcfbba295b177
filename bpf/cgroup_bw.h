/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cpu.max enforcement, a part of pyland's BPF core: it uses only what pyland_common.h declares, and
 * pyland.bpf.c calls it from its callbacks.
 *
 * Under sched_ext the kernel keeps a cgroup's cpu.max (quota, period, burst) but throttles nothing:
 * since 6.17 it only tells the BPF scheduler, in ops.cgroup_init and ops.cgroup_set_bandwidth. This
 * is the enforcement, mechanism only (a policy sees a task's cgroup and whether it was held, never
 * the budgets):
 *
 *   charge    a running task's CPU time goes to its cgroup and to every ancestor with a quota
 *             (ops.tick and ops.stopping); a cgroup whose period's charge reached its quota plus
 *             its burst credit is throttled, and so is every task below it
 *   hold      a throttled task is not run: ops.enqueue, and a decision arriving for it, put it in
 *             HELD_DSQ in arrival order; a running one is stopped at the tick
 *   roll      periods roll over lazily, whenever a cgroup is looked at: no timer per cgroup
 *   release   one timer fires at the earliest period end (or hold bound) a held task waits for
 *             and sends a CPU through ops.dispatch, which moves every held task whose cgroups have
 *             budget again, or that was held cfg.bw_max_hold_ns, to the shared DSQ, in order, behind
 *             the deadlines already running
 *
 * Cgroups without a quota are not in the map; with none anywhere every hook returns at once.
 */
#ifndef __PYLAND_CGROUP_BW_H
#define __PYLAND_CGROUP_BW_H

#include "pyland_common.h"

#define HELD_DSQ		(MAX_CPUS + 2)
#define BW_MAX_CGROUPS		4096
#define BW_INF			((u64)~0ULL)	/* cpu.max "max": no quota */
#define BW_RELEASE_SCAN_MAX	256
#define BW_MIN_ARM_NS		(10ULL * 1000)
/*
 * cfg.bw_max_hold_ns (2 s unless told): a task held this long is released even while its cgroup is
 * throttled. The kernel's watchdog ejects the scheduler when a runnable task waits timeout_ms (5 s),
 * and a tiny quota shared by many tasks would make them wait longer than that.
 */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BW_MAX_CGROUPS);
	__type(key, u64);
	__type(value, struct pyland_cgroup_bw);
} cgroup_bw SEC(".maps");

struct bw_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct bw_timer);
} bw_timer_map SEC(".maps");

static __always_inline bool bw_active(void)
{
	return pyl_cgroup_bw() && shared.nr_bw_cgroups;
}

/*
 * The cgroups a task's CPU time is charged to: its own and its ancestors', nearest first, up to
 * BW_MAX_LEVELS of them (the root, level 0, has no cpu.max). Ids, not pointers: they are read back
 * in ops.dispatch, where the kernel gives no cgroup of a task that is not the one being operated on.
 */
static __always_inline void bw_set_chain(struct task_ctx *tctx, struct cgroup *cgrp)
{
	int level = cgrp->level;
	u32 i, n = 0;

	tctx->cgroup_id = cgrp->kn->id;
	bpf_for(i, 0, BW_MAX_LEVELS) {
		struct cgroup *anc;

		if (level - (int)i < 1)
			break;
		anc = bpf_cgroup_ancestor___pyl(cgrp, level - i);
		if (!anc)
			break;
		tctx->bw_chain[i] = anc->kn->id;
		n = i + 1;
		bpf_cgroup_release___pyl(anc);
	}
	tctx->bw_nr = n;
}

static __always_inline u64 bw_allowance(const struct pyland_cgroup_bw *bw)
{
	return bw->quota_ns + bw->credit;
}

/*
 * Settle the periods that ended since period_start. One CPU wins the compare-and-swap of
 * period_start and settles; the others go on with the new period. Charges racing with the settle
 * are kept: `used` only ever changes by atomic adds and by this one subtraction.
 *
 * Unused quota becomes credit up to burst_ns, as the kernel's cpu.max.burst. An overspend (a task
 * runs until the next tick after its cgroup ran out, and a tick can come many periods late) is
 * carried as debt and paid with the next periods' quota, as the fair class pays a negative
 * runtime_remaining. The debt is bounded by what the hold bound lets it keep a task waiting
 * (bw_max_debt): past that, held tasks run anyway, and more debt would only hold them to no effect.
 */
static __always_inline u64 bw_max_debt(const struct pyland_cgroup_bw *bw)
{
	u64 periods = cfg.bw_max_hold_ns / bw->period_ns;

	return bw->quota_ns * (periods ? periods : 1);
}

static __always_inline void bw_roll(struct pyland_cgroup_bw *bw, u64 now)
{
	u64 start = bw->period_start, period = bw->period_ns, n, used, avail, debt = 0, credit = 0;

	if (!period || (s64)(now - start) < (s64)period)
		return;
	n = (now - start) / period;
	if (__sync_val_compare_and_swap(&bw->period_start, start, start + n * period) != start)
		return;
	used = bw->used;
	avail = bw->quota_ns * n + bw->credit;
	if (used > avail) {
		debt = used - avail;
		u64 max_debt = bw_max_debt(bw);

		if (debt > max_debt)
			debt = max_debt;
	} else {
		credit = avail - used;
		if (credit > bw->burst_ns)
			credit = bw->burst_ns;
	}
	bw->credit = credit;
	__sync_fetch_and_sub(&bw->used, used - debt);
	if (bw->throttled_at) {
		bw->throttled_ns += pyl_elapsed(now, bw->throttled_at);
		bw->throttled_at = 0;
	}
}

/*
 * The chain walks are global functions, not inlined: the verifier checks a global function once,
 * on its own, instead of again at every caller and in every iteration of a caller's loop.
 */

/* the id of the nearest cgroup of the task's chain that is out of budget; 0 when none is */
__noinline u64 bw_throttled_id(struct task_ctx *tctx, u64 now)
{
	struct pyland_cgroup_bw *bw;
	u32 i;

	if (!tctx)
		return 0;
	bpf_for(i, 0, BW_MAX_LEVELS) {
		if (i >= tctx->bw_nr)
			break;
		bw = bpf_map_lookup_elem(&cgroup_bw, &tctx->bw_chain[i]);
		if (!bw)
			continue;
		bw_roll(bw, now);
		if (bw->used >= bw_allowance(bw))
			return tctx->bw_chain[i];
	}
	return 0;
}

/* the nearest cgroup of the task's chain that is out of budget; NULL when none is */
static __always_inline struct pyland_cgroup_bw *bw_throttled(struct task_ctx *tctx, u64 now)
{
	u64 id = bw_throttled_id(tctx, now);

	return id ? bpf_map_lookup_elem(&cgroup_bw, &id) : NULL;
}

/* ops.dispatch must not extend the slice of a task the tick stopped for its cgroup's quota */
static __always_inline bool bw_task_throttled(struct task_struct *p)
{
	struct task_ctx *tctx;

	if (!bw_active() || !(tctx = lookup_task_ctx(p)))
		return false;
	return bw_throttled_id(tctx, bpf_ktime_get_ns()) != 0;
}

/* Charge `delta` ns of the task's CPU time to every cgroup of its chain that has a quota. */
__noinline int bw_charge_chain(struct task_ctx *tctx, u64 delta, u64 now)
{
	struct pyland_cgroup_bw *bw;
	u32 i;

	if (!tctx)
		return 0;
	bpf_for(i, 0, BW_MAX_LEVELS) {
		if (i >= tctx->bw_nr)
			break;
		bw = bpf_map_lookup_elem(&cgroup_bw, &tctx->bw_chain[i]);
		if (!bw)
			continue;
		bw_roll(bw, now);
		__sync_fetch_and_add(&bw->usage_ns, delta);
		if (__sync_add_and_fetch(&bw->used, delta) >= bw_allowance(bw) &&
		    __sync_val_compare_and_swap(&bw->throttled_at, 0, now) == 0)
			__sync_fetch_and_add(&bw->nr_throttled, 1);
	}
	return 0;
}

/*
 * Charge the CPU time since the task was last charged to its chain. The time is the kernel's own
 * account of it (se.sum_exec_runtime, which the scheduler core brings up to date before ops.tick
 * and ops.stopping), the very clock cpu.stat's usage_usec and the fair class's quota count: wall
 * time would also charge the interrupts that ran on the task's CPU.
 */
static __always_inline void bw_charge(struct task_struct *p, struct task_ctx *tctx, u64 now)
{
	u64 exec = p->se.sum_exec_runtime, delta = exec - tctx->bw_charged_exec;

	tctx->bw_charged_exec = exec;
	if ((s64)delta > 0)
		bw_charge_chain(tctx, delta, now);
}

/*
 * Arm the release timer for `at` unless it already fires earlier. Two CPUs arming at once can
 * leave the later time armed; the release scan re-arms for whatever still waits, so a held task
 * is late by at most one of its periods, and the watchdog bound (cfg.bw_max_hold_ns) holds anyway.
 */
static __always_inline void bw_arm(u64 at, u64 now)
{
	struct bw_timer *t;
	u64 armed = shared.bw_timer_at;
	u32 key = 0;

	if (armed && (s64)(armed - now) > 0 && (s64)(armed - at) <= 0)
		return;
	t = bpf_map_lookup_elem(&bw_timer_map, &key);
	if (!t)
		return;
	shared.bw_timer_at = at;
	bpf_timer_start(&t->timer, (s64)(at - now) > (s64)BW_MIN_ARM_NS ? at - now : BW_MIN_ARM_NS, 0);
}

/*
 * When a held task may go: at its cgroup's period end, or once it was held cfg.bw_max_hold_ns,
 * whichever comes first. The period end alone would let a task wait a whole period past the bound
 * when the period is the longer (cpu.max periods go up to 1 s).
 */
static __always_inline u64 bw_release_at(const struct pyland_cgroup_bw *bw, u64 held_at)
{
	u64 end = bw->period_start + bw->period_ns, bound = held_at + cfg.bw_max_hold_ns;

	return (s64)(bound - end) < 0 ? bound : end;
}

/* Put a task of a throttled cgroup aside; the release scan brings it back. */
static __always_inline void bw_hold(struct task_struct *p, struct task_ctx *tctx, struct pyland_cgroup_bw *bw,
				    u64 enq_flags, u64 now)
{
	tctx->bw_held_at = now;
	tctx->bw_was_held = true;
	pyl_dsq_insert(p, HELD_DSQ, cfg.slice_ns, enq_flags);
	__sync_fetch_and_add(&bw->nr_held, 1);
	__sync_fetch_and_add(&shared.nr_bw_held, 1);
	bw_arm(bw_release_at(bw, now), now);
}

/*
 * ops.enqueue, and a decision that arrives for a task: a task of a throttled cgroup waits aside.
 * True when it does. Callers check bw_active() first.
 */
static __always_inline bool bw_hold_if_throttled(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags)
{
	u64 now = bpf_ktime_get_ns();
	struct pyland_cgroup_bw *bw = bw_throttled(tctx, now);

	if (!bw)
		return false;
	bw_hold(p, tctx, bw, enq_flags, now);
	return true;
}

/* ops.tick: charge the running task, and stop it if that used up its cgroup's quota; true then */
static __always_inline bool bw_tick(struct task_struct *p, struct task_ctx *tctx)
{
	u64 now = bpf_ktime_get_ns();

	bw_charge(p, tctx, now);
	if (!bw_throttled(tctx, now))
		return false;
	pyl_set_slice(p, 0);
	__sync_fetch_and_add(&shared.nr_bw_preempted, 1);
	return true;
}

/*
 * From ops.dispatch once the timer fired: every held task whose cgroups have budget again goes to
 * the shared DSQ, in the order it was held, with a deadline behind the ones already running
 * (fallback_deadline), so a released cgroup does not jump the queue; so does one held
 * cfg.bw_max_hold_ns (nr_bw_overdue). The earliest time one of the others may go re-arms the timer.
 */
static __always_inline void bw_release_held(u64 now)
{
	struct bpf_iter_scx_dsq it;
	struct task_struct *p;
	bool all = false;
	u64 next = 0;
	int i;

	if (!shared.bw_release)
		return;
	shared.bw_release = 0;
	pyl_iter_dsq_new(&it, HELD_DSQ, 0);
	/*
	 * bpf_for bounds the scan, not a counter of our own: the verifier follows a counter compared
	 * with a constant through every value it takes, where bpf_for's index is a range whose loop
	 * states converge after a few passes.
	 */
	bpf_for(i, 0, BW_RELEASE_SCAN_MAX) {
		struct pyland_cgroup_bw *bw;
		struct task_ctx *tctx;

		p = bpf_iter_scx_dsq_next(&it);
		if (!p) {
			all = true;
			break;
		}
		tctx = lookup_task_ctx(p);
		if (!tctx)
			continue;
		bw = bw_throttled(tctx, now);
		if (bw && pyl_elapsed(now, tctx->bw_held_at) < cfg.bw_max_hold_ns) {
			u64 end = bw_release_at(bw, tctx->bw_held_at);

			if (!next || (s64)(end - next) < 0)
				next = end;
			continue;
		}
		if (bw)
			__sync_fetch_and_add(&shared.nr_bw_overdue, 1);
		tctx->dsq_at = pyl_now();
		if (pyl_dsq_move_vtime(&it, p, SHARED_DSQ, fallback_deadline(tctx)))
			__sync_fetch_and_add(&shared.nr_bw_released, 1);
	}
	bpf_iter_scx_dsq_destroy(&it);
	if (!all)
		shared.bw_release = 1;	/* more than one scan's worth: the next dispatch goes on */
	if (next)
		bw_arm(next, now);
}

/* The timer: the held tasks' wait is over. Any idle CPU runs the release; else this one. */
static int bw_timer_fn(void *map, int *key, struct bw_timer *t)
{
	u32 cpu, nr_cpus = scx_bpf_nr_cpu_ids();

	shared.bw_timer_at = 0;
	shared.bw_release = 1;
	bpf_for(cpu, 0, nr_cpus)
		pyl_kick_cpu(cpu, SCX_KICK_IDLE);
	pyl_kick_cpu(bpf_get_smp_processor_id(), SCX_KICK_PREEMPT);
	return 0;
}

/* the cgroup has no quota (any more), or is gone: out of the map */
static __always_inline void bw_forget(u64 id)
{
	if (!bpf_map_delete_elem(&cgroup_bw, &id))
		__sync_fetch_and_sub(&shared.nr_bw_cgroups, 1);
}

/* cpu.max of one cgroup changed (or is first seen): a new period starts now */
static __always_inline void bw_set(u64 id, u64 period_us, u64 quota_us, u64 burst_us)
{
	struct pyland_cgroup_bw *bw, fresh = {};
	u64 now = bpf_ktime_get_ns();

	if (quota_us == BW_INF || !period_us || !quota_us) {
		if (!bpf_map_delete_elem(&cgroup_bw, &id))
			__sync_fetch_and_sub(&shared.nr_bw_cgroups, 1);
		shared.bw_release = 1;	/* whatever it held may go */
		bw_arm(now, now);
		return;
	}
	bw = bpf_map_lookup_elem(&cgroup_bw, &id);
	if (!bw) {
		if (bpf_map_update_elem(&cgroup_bw, &id, &fresh, BPF_NOEXIST))
			return;	/* full (BW_MAX_CGROUPS): this cgroup stays unlimited */
		__sync_fetch_and_add(&shared.nr_bw_cgroups, 1);
		bw = bpf_map_lookup_elem(&cgroup_bw, &id);
		if (!bw)
			return;
	}
	if (bw->throttled_at) {
		bw->throttled_ns += pyl_elapsed(now, bw->throttled_at);
		bw->throttled_at = 0;
	}
	bw->period_ns = period_us * 1000;
	bw->quota_ns = quota_us * 1000;
	bw->burst_ns = burst_us == BW_INF ? 0 : burst_us * 1000;
	bw->credit = 0;
	bw->used = 0;
	bw->period_start = now;
	shared.bw_release = 1;	/* a raised quota frees what it held */
	bw_arm(now, now);
}

static __always_inline s32 bw_init(void)
{
	struct bw_timer *t;
	u32 key = 0;
	s32 err;

	if (!pyl_cgroup_bw())
		return 0;
	err = pyl_create_dsq(HELD_DSQ, -1);
	if (err)
		return err;
	t = bpf_map_lookup_elem(&bw_timer_map, &key);
	if (!t)
		return -ENOMEM;
	/* -EBUSY on a restart's attachment: set up by the first, stopped by bw_stop() */
	bpf_timer_init(&t->timer, &bw_timer_map, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&t->timer, bw_timer_fn);
	return 0;
}

/* ops.exit: the release timer must not fire between two attachments of the object */
static __always_inline void bw_stop(void)
{
	struct bw_timer *t;
	u32 key = 0;

	t = bpf_map_lookup_elem(&bw_timer_map, &key);
	if (t)
		bpf_timer_cancel(&t->timer);
}

#endif /* __PYLAND_CGROUP_BW_H */
