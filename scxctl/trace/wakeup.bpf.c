/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Wake-up to run latency of the tasks a filter selects, measured in the kernel and compiled by
 * bcc at the start of `scxctl trace wakeup`.
 *
 * sched_waking and sched_wakeup_new stamp the woken task, sched_switch stamps a prev that stays
 * runnable (preempted) and turns the stamp of next into a delay, counted in a per-CPU histogram
 * of the task's group. User space adds the CPUs up and never sees single events.
 *
 * scxctl.trace.wakeup prepends the choices of each run as #defines:
 *
 *   SLOTS, GROUPS           histogram slots per group (quarter octaves), and groups
 *   STAMP_BITS              log2 of the number of stamp slots
 *   TASK_PID_OFF            byte offsets of the task and cgroup members read, from the
 *   TASK_TGID_OFF, ...      running kernel's BTF (no kernel header is included)
 *   FILTER_TGID             keep the tasks of this process
 *   FILTER_CGROUP_ID        keep the tasks in this cgroup v2 (by id) or below it; with
 *   FILTER_CGROUP_LEVEL     its depth below the root
 *   FILTER_COMM_PREFIX(c)   keep the tasks whose name c has this prefix
 *   FILTER_COMM_GROUP(c)    the group of the name c, -1 for a name not kept
 *
 * All the filters given must hold; without a name filter, every task kept is in group 0.
 */

#if !defined(SLOTS) || !defined(GROUPS) || !defined(STAMP_BITS) || !defined(TASK_PID_OFF)
#error "scxctl.trace.wakeup prepends the #defines of a run to this file"
#endif

struct stamp {
	u64 task;	/* the address of the task the slot holds (0: none yet) */
	u64 ts;		/* when the task began to wait; 0: not waiting */
	u32 gen;	/* filter_gen when group was decided */
	s32 group;	/* its histogram group; -1: the filter drops it */
};

/*
 * One slot per hash of the task's address (the tracepoints pass it, nothing to read): an array,
 * whose lookups the verifier inlines, where a hash map would cost a helper call and a key hash at
 * every wake-up and switch. A task that finds its slot held by another takes it over, unless the
 * other is waiting and the newcomer is not traced; a traced wait lost that way is counted (lost).
 */
BPF_ARRAY(start, struct stamp, 1 << STAMP_BITS);
BPF_ARRAY(filter_gen, u32, 1);		/* bumped when what the filter reads may have changed */
BPF_ARRAY(lost, u64, 1);
BPF_PERCPU_ARRAY(idle_task, u64, 1);	/* this CPU's idle task, learned at first sight */

/* per CPU, so that sched_switch updates them without atomics (user space sums the CPUs) */
BPF_PERCPU_ARRAY(dist, u64, SLOTS * GROUPS);
BPF_PERCPU_ARRAY(maxv, u64, GROUPS);
BPF_PERCPU_ARRAY(sumv, u64, GROUPS);

/* dst = the kernel's bytes at base + off, the offset of a member in the running kernel */
#define READ_AT(dst, base, off) \
	bpf_probe_read_kernel(&(dst), sizeof(dst), (const char *)(base) + (off))

static __always_inline u32 pid_of(const void *p)
{
	u32 pid = 0;

	READ_AT(pid, p, TASK_PID_OFF);
	return pid;
}

#ifdef FILTER_TGID
static __always_inline bool in_process(const void *p)
{
	u32 tgid = 0;

	READ_AT(tgid, p, TASK_TGID_OFF);
	return tgid == FILTER_TGID;
}
#endif

#ifdef FILTER_CGROUP_ID
/*
 * The woken task's cgroup v2 (not the waker's) is the cgroup or below it: it is at least as deep,
 * and its ancestor at the cgroup's depth has the cgroup's id (its kernfs node's). The chain is read
 * unlocked, under the RCU the tracepoint holds: a move racing with it is caught by filter_gen.
 */
static __always_inline bool in_cgroup(const void *p)
{
	const void *cs = NULL, *cg = NULL, *anc = NULL, *kn = NULL;
	int level = 0;
	u64 id = 0;

	READ_AT(cs, p, TASK_CGROUPS_OFF);
	READ_AT(cg, cs, CSS_SET_DFL_CGRP_OFF);
	READ_AT(level, cg, CGROUP_LEVEL_OFF);
	if (level < FILTER_CGROUP_LEVEL)
		return false;
	READ_AT(anc, cg, CGROUP_ANCESTORS_OFF + FILTER_CGROUP_LEVEL * sizeof(void *));
	READ_AT(kn, anc, CGROUP_KN_OFF);
	READ_AT(id, kn, KERNFS_NODE_ID_OFF);
	return id == FILTER_CGROUP_ID;
}
#endif

#if defined(FILTER_COMM_PREFIX) || defined(FILTER_COMM_GROUP)
#define FILTER_COMM	/* a name filter: the program reads comm, which a rename changes */
/* the group of a task by its name (comm), -1 for a name the filter drops */
static __always_inline int comm_group(const void *p)
{
	unsigned char c[16] = {};

	READ_AT(c, p, TASK_COMM_OFF);
#ifdef FILTER_COMM_PREFIX
	if (!FILTER_COMM_PREFIX(c))
		return -1;
#endif
#ifdef FILTER_COMM_GROUP
	return FILTER_COMM_GROUP(c);
#else
	return 0;
#endif
}
#endif

/* the histogram group of task p, -1 for one the filter drops */
static __always_inline int group_of(const void *p)
{
#ifdef FILTER_TGID
	if (!in_process(p))
		return -1;
#endif
#ifdef FILTER_CGROUP_ID
	if (!in_cgroup(p))
		return -1;
#endif
#ifdef FILTER_COMM
	return comm_group(p);
#else
	return 0;
#endif
}

static __always_inline struct stamp *slot_for(u64 p)
{
	/* Fibonacci hashing: the top bits of the address times 2^64 / phi */
	u32 i = (u32)((p * 0x9E3779B97F4A7C15ULL) >> (64 - STAMP_BITS));

	return start.lookup(&i);
}

/*
 * Arm p's slot (p is never the idle task: it is not woken, and sched_switch skips it as prev).
 * The filter runs when the slot changes hands, when p is new (fresh: a new task may sit at a
 * freed one's address) and after any change to what the filter reads (filter_gen); otherwise the
 * group decided before stands, and a wake-up reads nothing of the task.
 *
 * Slots are shared by every CPU without a lock. A task's own stamp and the switch to it never
 * race: it is stamped before it is queued (woken) or while it is switched out (preempted), and
 * queueing and switching take its run queue's lock. Two tasks that share a slot can race on two
 * CPUs: at worst one of their waits is mismeasured, or dropped without being counted.
 */
static __always_inline int stamp(u64 p, bool fresh)
{
	u32 zero = 0;
	struct stamp *st = slot_for(p);
	u32 *genp = filter_gen.lookup(&zero);
	u32 gen;

	if (!st || !genp)
		return 0;
	/*
	 * Read before the filter runs: a change counted after this read, which the filter may not
	 * have seen, leaves st->gen behind, and the next stamp decides again.
	 */
	gen = *genp;
	if (st->task != p) {
		int g = group_of((const void *)p);

		if (st->ts) {	/* another task's wait is armed in this slot */
			if (g < 0)
				return 0;	/* p is not traced: leave the slot to the other */
			lost.increment(zero);
		}
		st->task = p;
		st->group = g;
		st->gen = gen;
	} else if (fresh || st->gen != gen) {
		st->group = group_of((const void *)p);
		st->gen = gen;
	}
	/* ts last: a nonzero ts is what arms the slot */
	st->ts = st->group >= 0 ? bpf_ktime_get_ns() : 0;
	return 0;
}

/* floor(log2(v)) of a nonzero v, halving the width searched: no loop for the verifier */
static __always_inline u32 log2_u64(u64 v)
{
	u32 lg = 0;

	if (v >> 32) {
		v >>= 32;
		lg += 32;
	}
	if (v >> 16) {
		v >>= 16;
		lg += 16;
	}
	if (v >> 8) {
		v >>= 8;
		lg += 8;
	}
	if (v >> 4) {
		v >>= 4;
		lg += 4;
	}
	if (v >> 2) {
		v >>= 2;
		lg += 2;
	}
	if (v >> 1)
		lg += 1;
	return lg;
}

/* the histogram slot of a delay: 4 per octave, as slot_of in scxctl/trace/hist.py */
static __always_inline u32 slot_of(u64 d)
{
	u32 lg;

	if (d < 4)
		return d;
	lg = log2_u64(d);
	/* the two bits below the top one pick the quarter of the octave */
	return 4 * lg + ((d >> (lg - 2)) & 3);
}

/*
 * Count a delay of group g in this CPU's counters. Only sched_switch writes them, with interrupts
 * off, and a program cannot nest in itself on a CPU: plain adds suffice.
 */
static __always_inline void count(u32 g, u64 d)
{
	u32 idx = g * SLOTS + slot_of(d);
	u64 *cnt = dist.lookup(&idx);
	u64 *sum, *m;

	if (cnt)
		*cnt += 1;
	sum = sumv.lookup(&g);
	if (sum)
		*sum += d;
	m = maxv.lookup(&g);
	if (m && d > *m)
		*m = d;
}

/*
 * The waker's side of try_to_wake_up, before the wake-up may be queued to the target CPU's wake
 * list: sched_wakeup would fire only once that CPU took the IPI and left idle.
 */
RAW_TRACEPOINT_PROBE(sched_waking)
{
	return stamp(ctx->args[0], false);
}

RAW_TRACEPOINT_PROBE(sched_wakeup_new)
{
	return stamp(ctx->args[0], true);
}

RAW_TRACEPOINT_PROBE(sched_switch)
{
	/* TP_PROTO(bool preempt, prev, next, unsigned int prev_state) */
	u64 prev = ctx->args[1], next = ctx->args[2];
	u32 zero = 0;
	u64 *idle = idle_task.lookup(&zero);
	struct stamp *st;
	u64 d;
	u32 g;

	if (!idle)
		return 0;
	/*
	 * The idle task is half of all switches on a machine that is not busy. It is recognised by
	 * its address (per CPU) rather than by reading its pid, a helper call, at every switch. It
	 * is learned where it shows up as a runnable prev.
	 *
	 * prev is stamped before next is looked up: if the two share a slot and prev is traced,
	 * next's wait is the one lost (and counted).
	 */
	if ((ctx->args[0] || (unsigned int)ctx->args[3] == 0) && prev != *idle) {
		if (pid_of((const void *)prev) == 0)
			*idle = prev;
		else
			stamp(prev, false);	/* preempted: it waits again from now */
	}
	if (next == *idle)
		return 0;
	st = slot_for(next);
	if (!st || st->task != next || !st->ts)
		return 0;
	d = bpf_ktime_get_ns() - st->ts;
	g = st->group;
	st->ts = 0;	/* disarmed; the slot stays the task's for its next wake-up */
	/* an armed slot's group is never -1; the bound is for the verifier */
	if (g >= GROUPS)
		return 0;
	count(g, d);
	return 0;
}

#ifdef FILTER_COMM
/*
 * What the filter reads can change under a task: every group is decided again after such a
 * change, lazily, at each task's next stamp. A rename fires this before the new name is written:
 * a stamp of that task on another CPU in between keeps the old name's verdict until the next one.
 */
RAW_TRACEPOINT_PROBE(task_rename)
{
	u32 zero = 0;

	filter_gen.increment(zero);
	return 0;
}
#endif

#ifdef FILTER_CGROUP_ID
/* fires once the task has moved: a stamp that read the old cgroup sees a new filter_gen next */
RAW_TRACEPOINT_PROBE(cgroup_attach_task)
{
	u32 zero = 0;

	filter_gen.increment(zero);
	return 0;
}
#endif
