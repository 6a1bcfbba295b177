/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pyland: the BPF core of a sched_ext scheduler whose decisions are made in Python.
 *
 * One compilation unit: this file has the struct_ops callbacks; cgroup_bw.h (cpu.max enforcement)
 * and steer.bpf.h (steer mode) are parts of it, and pyland_common.h declares what they all share.
 * docs/design-notes.md has the measurements and the history behind the choices made here.
 *
 * Flow: ops.enqueue sends each task that needs a decision to user space through the `queued` ring
 * buffer; the Python loop (scxctl/pyland/loop.py) answers with one pyland_decision per task through
 * the `dispatched` user ring buffer; ops.dispatch drains those decisions into DSQs:
 *
 *   per-CPU DSQs 0..nr_cpu_ids-1   tasks user space placed on a CPU (vtime-ordered by deadline)
 *   SHARED_DSQ                     tasks for any CPU, and the BPF-side fallbacks
 *   SCHED_DSQ                      only the scheduler process itself
 *   HELD_DSQ                       tasks whose cgroup is out of cpu.max quota (cgroup_bw.h)
 *
 * Kernels that cannot create DSQs or walk them (pyl_custom_dsqs() false, see compat.h) get the same
 * flow on the kernel's built-in DSQs, which are FIFO:
 *
 *   SCX_DSQ_LOCAL_ON | cpu         tasks user space placed on a CPU
 *   SCX_DSQ_GLOBAL                 tasks for any CPU, and the BPF-side fallbacks
 *   SCX_DSQ_LOCAL, at the head     the scheduler process, when it wakes up (see pyland_enqueue)
 *
 * The kernel serves both itself: a CPU takes its local DSQ, then the global one, and calls
 * ops.dispatch only when both are empty. FIFO order cannot starve a task the way deadlines can, so
 * nothing is lost with the starvation rescue, which needs the DSQ iterator.
 *
 * The hand-off rules between this core and user space, marked Rn where they are implemented, with
 * the race each ordering prevents named next to it:
 *   R1  a record is counted before it is published
 *   R2  the scheduler's threads are told apart by one test: their TGID
 *   R3  finished decisions are drained before the scheduler runs again
 *   R4  a preemption request is never dropped silently
 *   R5  the BPF slice (3 ms) is apart from the user-space budget (20 ms)
 *   R6  kernel threads the scheduler may depend on run without a round trip
 *   R7  every enqueue has a generation; a decision for an older one is dropped, a task never is
 *   R8  a waking task goes straight to an idle CPU (the built-in idle pick)
 *   R9  a heartbeat keeps pending work moving, and the exit reason is kept for user space
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "pyland.h"
#include "compat.h"
#include "pyland_common.h"
#include "cgroup_bw.h"
#include "steer.bpf.h"

char _license[] SEC("license") = "GPL";

#define USERSCHED_SLICE_NS	(20ULL * 1000 * 1000)	/* bounded: a runaway policy cannot own a CPU */
#define NR_QUEUED_RECORDS	4096	/* decisions the user ring holds */
#define RESCUE_PERIOD_NS	(20ULL * 1000 * 1000)
#define RESCUE_SCAN_MAX		4096	/* tasks of one DSQ the starvation rescue looks at */
/* pending work without a record consumed for this many policy budgets stops pyland (heartbeat) */
#define PROGRESS_BUDGETS	10

/*
 * The only variable in .rodata. User space writes every member before load, from `scxctl run`'s
 * options (open_configured in scxctl/pyland/scheduler.py): no default here to drift from those.
 */
const volatile struct pyland_config cfg;

/* Counters and exit info shared with user space; the only variable in .bss (offset 0). */
struct pyland_shared shared;

/* 1 until ops.tick sees otherwise (learn_entry_migration_depth): most kernels' entry code adds one */
u16 entry_migration_depth = 1;

/* tasks waiting for decide(): 512 KiB, about 3600 records */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 512 * 1024);
} queued SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_USER_RINGBUF);
	__uint(max_entries, NR_QUEUED_RECORDS * (sizeof(struct pyland_decision) + 8));
} dispatched SEC(".maps");

/*
 * Policy calls that have run half their budget, for the user-space watchdog thread: it sleeps on
 * this ring instead of waking every few milliseconds to look at policy_since. One record per call.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} alarms SEC(".maps");

struct heartbeat {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct heartbeat);
} heartbeat_map SEC(".maps");

_Static_assert(sizeof(struct pyland_task) == 144, "pyland_task layout changed: update records.py");
_Static_assert(sizeof(struct pyland_decision) == 48, "pyland_decision layout changed: update records.py");
/* the drain tells an update from a decision by its size */
_Static_assert(sizeof(struct pyland_update) == 56, "pyland_update layout changed: update records.py");

/*
 * R2: every hook tells the scheduler's threads apart by TGID, never by PID. A Python process can
 * have more than one thread (the interpreter, libraries); checking the PID in one hook and the TGID
 * in another makes the count of running tasks and the watchdog's accounting disagree.
 */
static __always_inline bool is_usersched(const struct task_struct *p)
{
	return cfg.usersched_tgid && p->tgid == cfg.usersched_tgid;
}

/*
 * R6: kernel threads the scheduler itself may depend on run without a Python round trip: a per-CPU
 * kthread (ksoftirqd, kworker/N, rcu...) or a memory-reclaim thread stuck behind the Python process
 * can deadlock it (the Python scheduler page-faults -> needs kswapd -> which waits for Python).
 * Unbound kthreads too: sched_ext's own watchdog runs from an unbound kworker, and one left waiting
 * behind a wake-up flood lets the watchdog eject pyland.
 */
static __always_inline bool is_critical_kthread(const struct task_struct *p)
{
	if (p->flags & (PF_KSWAPD | PF_KTHREAD))
		return true;	/* kswapd, kcompactd, khugepaged, per-CPU and unbound kthreads */
	return false;
}

/*
 * Pending work for the scheduler. nr_queued is written by BPF, nr_consumed and nr_scheduled by
 * user space (single writer each). Because nr_queued is incremented before a record is published
 * (R1), a record user space can see is always already counted: nr_queued != nr_consumed can only
 * err towards "pending", never hide a published record.
 */
static __always_inline bool usersched_has_pending(void)
{
	return shared.nr_queued != shared.nr_consumed || shared.nr_scheduled > 0 ||
	       bpf_ringbuf_query(&queued, BPF_RB_AVAIL_DATA) > 0;
}

/*
 * Direct wake-up grant. A Python round trip costs every wake-up the queue, a scheduler wake-up, a
 * decision and a drain: for a latency-critical task that is most of its wake-up latency.
 * When the policy's last answer to a wake-up of a task asked for direct wake-ups
 * (PYLAND_DECISION_DIRECT_WAKE: it judged the task latency-critical), BPF places the task's next
 * wake-up itself, at the head of its CPU's local DSQ, and still publishes the record, marked
 * `placed`: the policy sees every wake-up, and its decision for a wake-up placed here only renews
 * or withdraws the grant and sets the vtime (apply_decision), so the policy keeps the last word.
 *
 * Local head insertions bypass the per-CPU and shared DSQs, which only ops.dispatch consumes, and
 * every task at the tail of the local DSQ itself (a rescued task, a wake-up sent to an idle CPU),
 * and ops.dispatch only runs when the local DSQ runs dry. So the grant holds only while nobody waits
 * in those three DSQs or on a CPU whose dispatch served its DSQs within direct_wake_ns (one BPF
 * slice): a stream of granted tasks cannot keep a waiting task out for longer than that (then
 * their wake-ups queue like any other). A dispatch that ran the scheduler instead does not count:
 * under a flood of granted sleepers every such dispatch would renew the grant.
 */
static __always_inline bool direct_wake_allowed(const struct task_ctx *tctx, s32 cpu, u64 enq_flags)
{
	struct cpu_ctx *cctx = lookup_cpu_ctx(cpu);

	/* while this CPU's rescue finds starving tasks, none is passed (see rescue_due) */
	if (!cfg.direct_wake_ns || !(enq_flags & SCX_ENQ_WAKEUP) || !tctx->direct_wake ||
	    (cctx && cctx->starving))
		return false;
	/*
	 * Where the kernel cannot count (-1), and for SCX_DSQ_GLOBAL, which it does not count (-ENOENT),
	 * someone may wait: only a recent dispatch grants the wake-up then.
	 */
	if (!pyl_dsq_nr_queued(SCX_DSQ_LOCAL_ON | cpu) && !pyl_dsq_nr_queued(cpu_dsq(cpu)) &&
	    !pyl_dsq_nr_queued(shared_dsq()))
		return true;	/* nobody waits that the insertion could pass */
	if (cctx && pyl_elapsed(pyl_now(), cctx->served_at) < cfg.direct_wake_ns)
		return true;
	__sync_fetch_and_add(&shared.nr_grant_waits, 1);
	return false;
}

/*
 * Has the policy overrun its budget? User space stamps policy_since (CLOCK_MONOTONIC, the clock of
 * bpf_ktime_get_ns) before each call into the policy and clears it after the batch. The stamp and the clock
 * are read on different CPUs without ordering: a stamp newer than `now` reads as "not stalled".
 */
static __always_inline bool policy_stalled(u64 now, u64 budget)
{
	u64 since = shared.policy_since;

	return budget && since && now > since && now - since > budget;
}

/*
 * Is the watchdog timing the policy's call? Once the heartbeat has told it of a call half a budget
 * old, the scheduler's threads go before everything else until the call ends or the watchdog
 * detaches pyland (1.25 budgets after the call began on an idle machine, a few under thousands of
 * sleepers; BPF's backstop at PROGRESS_BUDGETS), so this cannot last. Both threads need a CPU
 * then: the watchdog to look, and the loop thread to hand it the interpreter lock. Left behind
 * rescues and report periods under a load of thousands of sleepers, each look waited about a
 * report period, and the backstop ejected pyland first.
 */
static __always_inline bool policy_watched(void)
{
	u64 since = shared.policy_since;

	return since && since == shared.policy_alarmed;
}

/*
 * Where a task BPF places itself goes in the deadline order.
 *
 * A task the policy never decided (a new one, deadline 0) goes where the policy would put it: as far
 * past the latest deadline that got a CPU (vtime_now) as the policy's own decisions land on average.
 * A deadline of 0 would put every child of a fork storm ahead of all the tasks already waiting. The
 * lead is in the policy's units, whatever they are: a policy counting arrivals (fifo) has deadlines
 * a few units apart, and a fixed lead in nanoseconds would put new tasks behind millions of its
 * future decisions.
 *
 * Any other task keeps its last deadline while that is still ahead of vtime_now, and one at or
 * behind it (it has run since) goes where a new one does. Under overload BPF places the same tasks
 * again and again without the policy seeing them; put back at vtime_now they would stay at the
 * front, since vtime_now moves only as far as the deadlines that run, and every task the policy
 * placed later would wait behind them until the starvation rescue took it.
 */
static __always_inline u64 fallback_deadline(struct task_ctx *tctx)
{
	u64 floor = shared.vtime_now;

	if (!tctx->deadline)
		__sync_fetch_and_add(&shared.nr_fair_new, 1);
	if (!tctx->deadline || (s64)(tctx->deadline - floor) <= 0)
		tctx->deadline = floor + shared.deadline_lead;
	return tctx->deadline;
}

/* BPF places a task itself, at the deadline above */
static __always_inline void place_in_order(struct task_struct *p, struct task_ctx *tctx, u64 dsq_id,
					   u64 now, u64 enq_flags)
{
	insert_ordered(p, tctx, dsq_id, cfg.slice_ns, fallback_deadline(tctx), now, enq_flags);
}

/*
 * Follow how far ahead of vtime_now the policy places tasks: an average over the last few dozen
 * decisions (a shift of 5: 1/32 weight per decision). Racy across CPUs: a lost update only moves
 * the average by one decision's share.
 */
static __always_inline void track_deadline_lead(u64 deadline)
{
	s64 lead = (s64)(deadline - shared.vtime_now);
	u64 avg = shared.deadline_lead;

	if (lead < 0)
		lead = 0;
	shared.deadline_lead = avg - (avg >> 5) + ((u64)lead >> 5);
}

/* bytes one `queued` record takes in the ring: the 8-byte header, then the record, 8-aligned */
#define QUEUED_RECORD_BYTES	((8 + sizeof(struct pyland_task) + 7) & ~7UL)

/*
 * Flags for submitting a reserved record: does it wake the Python loop? A direct wake-up's record
 * is news, not work: the task already runs, and waking the scheduler for it (an IPI, a wake-up,
 * often on the very CPU the woken task is about to run on) would slow every direct wake-up. So it
 * is submitted quietly, and read with the next batch.
 *
 * The ring's own (adaptive) notification wakes the reader only when the record is the first one
 * it has not consumed. Behind an unread quiet record that is never true, so a record with work in
 * it would not wake a sleeping loop either: it forces the wake-up whenever the ring holds more than
 * itself. Queried after the reserve, that count includes every record reserved before this one
 * (on any CPU); one reserved after it only costs a spare wake-up. A quiet record itself is read at
 * the latest when the loop's idle epoll wait times out (100 ms).
 */
static __always_inline u64 submit_flags(bool placed)
{
	if (placed) {
		__sync_fetch_and_add(&shared.nr_quiet, 1);
		return BPF_RB_NO_WAKEUP;
	}
	return bpf_ringbuf_query(&queued, BPF_RB_AVAIL_DATA) > QUEUED_RECORD_BYTES ? BPF_RB_FORCE_WAKEUP : 0;
}

/*
 * The record of `p` as of now, for the policy; the counters it carries start again. `placed`: BPF
 * placed the task already, the decision only updates what it stores for next time.
 */
static __always_inline void fill_record(struct pyland_task *rec, struct task_struct *p, struct task_ctx *tctx,
					u64 enq_flags, u32 kind, bool placed, u64 now)
{
	rec->pid = p->pid;
	rec->cpu = scx_bpf_task_cpu(p);
	rec->nr_cpus_allowed = p->nr_cpus_allowed;
	rec->flags = (u32)enq_flags;
	rec->start_ts = tctx->start_ts;
	rec->stop_ts = tctx->stop_ts;
	rec->exec_runtime = tctx->exec_runtime;
	rec->weight = p->scx.weight;
	rec->placed = placed;
	rec->vtime = cfg.steer ? tctx->vruntime : tctx->vtime;
	rec->enq_cnt = tctx->enq_cnt;
	bpf_probe_read_kernel_str(rec->comm, sizeof(rec->comm), p->comm);
	rec->cgroup_id = tctx->cgroup_id;
	rec->throttled = tctx->bw_was_held;
	rec->run_ns = tctx->run_ns;
	rec->kind = kind;
	rec->nr_wakeups = tctx->nr_wakeups;
	rec->waker = tctx->waker;
	rec->class_id = tctx->class_id;
	rec->deadline = cfg.steer ? tctx->deadline : 0;
	rec->sleep_ns = tctx->sleep_ns;
	rec->min_burst_ns = tctx->min_burst_ns;
	tctx->bw_was_held = false;
	tctx->run_ns = 0;
	tctx->nr_wakeups = 0;
	tctx->sleep_ns = 0;
	tctx->min_burst_ns = 0;
	tctx->record_at = now;
}

/*
 * Hand the task to the policy (decide()); false when it cannot go, counted, and the caller places it.
 *
 * Overload: a task queued behind max_backlog others waits for all of them to be decided (about
 * max_backlog / decisions-per-second), which under a wake-up flood on a slow machine can reach the
 * watchdog timeout. Past that backlog BPF schedules the task itself; the difference of two
 * single-writer counters may be momentarily stale, which only moves the threshold by a few records.
 * A policy stuck in decide() holds every task it was handed: user space detaches pyland soon after
 * the budget, and until then no new task joins them.
 */
static bool send_to_policy(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags, bool placed, u64 now)
{
	struct pyland_task *rec;

	if (shared.nr_queued - shared.nr_consumed >= cfg.max_backlog) {
		__sync_fetch_and_add(&shared.nr_backlog, 1);
		return false;
	}
	if (policy_stalled(bpf_ktime_get_ns(), cfg.stall_ns)) {
		__sync_fetch_and_add(&shared.nr_stalled, 1);
		return false;
	}
	rec = bpf_ringbuf_reserve(&queued, sizeof(*rec), 0);
	if (!rec) {
		/* R7: the ring is full: never drop the task, the caller places it; counted */
		__sync_fetch_and_add(&shared.nr_ring_full, 1);
		return false;
	}
	fill_record(rec, p, tctx, enq_flags, PYLAND_REC_ENQUEUE, placed, now);
	/*
	 * R1: count BEFORE publishing. If the record were submitted first, the Python loop could read
	 * it and publish nr_consumed = N + 1 while nr_queued is still N; a pending-work check in that
	 * window would see "nothing pending" (or a wrapped difference) and the task could be lost
	 * until the next unrelated wake-up.
	 */
	__sync_fetch_and_add(&shared.nr_queued, 1);
	bpf_ringbuf_submit(rec, submit_flags(placed));
	return true;
}

/*
 * Round-trip mode: what BPF places before the policy decides, on a grant the policy gave or because
 * the mechanism took the CPU; true when the task is placed.
 */
static __always_inline bool place_granted(struct task_struct *p, struct task_ctx *tctx, s32 cpu,
					  u64 enq_flags, bool yielded)
{
	if (yielded) {
		/*
		 * The slice was cut for the scheduler, not by the policy: the task keeps its deadline,
		 * on its CPU's DSQ if pinned, else on the shared DSQ, where the first free CPU takes it
		 * (on its own CPU's it would wait for the one CPU it was cut on). The record still goes
		 * out, quietly, so the policy charges the run.
		 */
		tctx->direct_gen = tctx->enq_cnt;
		if ((s64)(tctx->deadline - shared.vtime_now) < 0)
			tctx->deadline = shared.vtime_now;	/* not ahead of what runs now */
		insert_ordered(p, tctx, p->nr_cpus_allowed == 1 ? cpu_dsq(cpu) : shared_dsq(), cfg.slice_ns,
			       tctx->deadline, pyl_now(), enq_flags);
		__sync_fetch_and_add(&shared.nr_yield_requeues, 1);
		return true;
	}
	if (!direct_wake_allowed(tctx, cpu, enq_flags))
		return false;
	/*
	 * Head of the local DSQ of the CPU the task is enqueued on. A remote CPU is preempted; on this
	 * CPU the current task is usually the waker, which is about to block anyway.
	 */
	tctx->direct_gen = tctx->enq_cnt;
	pyl_dsq_insert(p, SCX_DSQ_LOCAL, tctx->slice ?: cfg.slice_ns,
		       enq_flags | SCX_ENQ_HEAD | (cpu != bpf_get_smp_processor_id() ? SCX_ENQ_PREEMPT : 0));
	__sync_fetch_and_add(&shared.nr_direct_wakes, 1);
	return true;
}

/*
 * Round-trip mode: every enqueue goes to decide(), except a task's first one (new_direct), kernel
 * threads (above) and what place_granted() places.
 */
static void roundtrip_enqueue(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags, bool first,
			      bool yielded)
{
	s32 cpu = scx_bpf_task_cpu(p);
	bool placed;
	u64 now;

	if (cfg.new_direct && first) {
		/*
		 * A fork, or a task older than the attach: the policy knows nothing of it, so a round
		 * trip buys no better place than BPF's own, behind the running deadlines, and sends no
		 * record (its decision could only store what the next record starts from anyway).
		 */
		place_in_order(p, tctx, shared_dsq(), pyl_now(), enq_flags);
		pyl_kick_cpu(cpu, SCX_KICK_IDLE);
		__sync_fetch_and_add(&shared.nr_new_direct, 1);
		return;
	}
	placed = place_granted(p, tctx, cpu, enq_flags, yielded);
	/*
	 * A placed task's record only lets the policy charge its run and renew its grant: one a budget
	 * is enough (run_ns carries every run since the last), and a granted task whose slice runs out
	 * still goes to the policy, so one that stopped sleeping is seen at once.
	 */
	now = pyl_now();
	if (placed && pyl_elapsed(now, tctx->record_at) < cfg.max_slice_ns) {
		__sync_fetch_and_add(&shared.nr_coalesced, 1);
		return;
	}
	if (send_to_policy(p, tctx, enq_flags, placed, now) || placed)
		return;
	/*
	 * The shared DSQ with the task's last deadline: it runs on the first CPU that looks. Without
	 * kicks, a task woken on an idle CPU still wakes it (the kernel reschedules an idle CPU a task
	 * is enqueued on); otherwise a busy CPU takes it when its slice ends.
	 */
	place_in_order(p, tctx, shared_dsq(), now, enq_flags);
	pyl_kick_cpu(cpu, SCX_KICK_IDLE);
}

s32 BPF_STRUCT_OPS(pyland_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct task_ctx *tctx;
	bool is_idle = false;
	s32 cpu;

	/*
	 * The scheduler goes through enqueue to SCHED_DSQ, never to a local DSQ directly (R3), but
	 * to an idle CPU when there is one: enqueue kicks the CPU chosen here, and an idle CPU runs
	 * it at once. Staying on prev_cpu would queue it behind the very tasks it must decide while
	 * another CPU idles.
	 */
	if (is_usersched(p)) {
		if (!cfg.builtin_idle)
			return prev_cpu;
		cpu = pyl_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
		return is_idle ? cpu : prev_cpu;
	}

	/* who woke it, for the policy and for wake_preempts: select_cpu runs in the waker's context */
	tctx = lookup_task_ctx(p);
	if (tctx) {
		tctx->waker = (s32)bpf_get_current_pid_tgid();
		if (cfg.steer)
			steer_note_waker(tctx);
	}
	if (!cfg.builtin_idle)
		return prev_cpu;
	/* a task of a throttled cgroup must not run: ops.enqueue holds it (cgroup_bw.h) */
	if (bw_active() && tctx && bw_throttled(tctx, bpf_ktime_get_ns()))
		return prev_cpu;
	if (cfg.steer && tctx)
		return steer_select_cpu(p, tctx, prev_cpu, wake_flags);

	/* R8: an idle CPU gets the task at once, without a Python round trip. */
	cpu = pyl_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	if (is_idle) {
		pyl_dsq_insert(p, SCX_DSQ_LOCAL, cfg.slice_ns, 0);
		__sync_fetch_and_add(&shared.nr_direct, 1);
	}
	return cpu;
}

/* the scheduler itself: never behind the tasks it must decide (R3) */
static void enqueue_usersched(struct task_struct *p, u64 enq_flags)
{
	struct cpu_ctx *cctx;

	shared.usersched_queued_at = pyl_now();	/* reports_due counts its wait from here */
	if (enq_flags & SCX_ENQ_LAST) {	/* nothing else wants its CPU: it goes on */
		pyl_dsq_insert(p, SCX_DSQ_LOCAL, USERSCHED_SLICE_NS, enq_flags);
		return;
	}
	if (pyl_custom_dsqs()) {
		/*
		 * FIFO DSQ of its own: ops.dispatch decides when the scheduler runs relative to the
		 * decisions it produced (R3). Kick its CPU so an idle CPU notices it.
		 */
		pyl_dsq_insert(p, SCHED_DSQ, USERSCHED_SLICE_NS, enq_flags);
		pyl_kick_cpu(scx_bpf_task_cpu(p), SCX_KICK_IDLE);
		return;
	}
	/*
	 * No DSQ of its own, and ops.dispatch cannot put it first: a woken scheduler goes to the head
	 * of the local DSQ of the CPU it woke on (the kernel wakes that CPU if idle; pyland_tick cuts
	 * the running task's slice). Only a wake-up: after a yield or an expired slice it queues at the
	 * tail, so the tasks queued here run between two of its turns and cannot starve behind it.
	 */
	cctx = lookup_cpu_ctx(scx_bpf_task_cpu(p));
	pyl_dsq_insert(p, SCX_DSQ_LOCAL, USERSCHED_SLICE_NS,
		       enq_flags | (enq_flags & SCX_ENQ_WAKEUP ? SCX_ENQ_HEAD : 0));
	if (cctx)
		cctx->usersched_queued = true;
}

void BPF_STRUCT_OPS(pyland_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx;
	bool first, yielded;

	if (is_usersched(p)) {
		enqueue_usersched(p, enq_flags);
		return;
	}
	if (is_critical_kthread(p)) {	/* R6 */
		pyl_dsq_insert(p, SCX_DSQ_LOCAL, cfg.slice_ns, enq_flags);
		__sync_fetch_and_add(&shared.nr_kthread, 1);
		return;
	}
	tctx = lookup_task_ctx(p);
	if (!tctx) {
		/* init_task creates the context for every task; a miss is a bug, fail loudly */
		scx_bpf_error("pyland: no task context for pid %d", p->pid);
		/* a kernel that cannot be told keeps pyland attached: the task must run somewhere */
		if (!pyl_can_report_error())
			pyl_dsq_insert(p, shared_dsq(), cfg.slice_ns, enq_flags);
		return;
	}
	/*
	 * R7: a new generation for every enqueue, bumped before a record carries it: a decision for an
	 * earlier enqueue (the task was dequeued and enqueued again meanwhile) is dropped in dispatch.
	 */
	tctx->enq_cnt++;
	if (enq_flags & SCX_ENQ_WAKEUP)
		tctx->wake_gen = tctx->enq_cnt;
	/* not enq_cnt == 1: the generation goes on from the last attachment's (ops.init_task) */
	first = !tctx->enqueued;
	tctx->enqueued = true;
	/* a cut slice is news for the enqueue that follows it only; a sleep in between ends it */
	yielded = tctx->yielded && !(enq_flags & SCX_ENQ_WAKEUP);
	tctx->yielded = false;

	/* cpu.max: a task whose cgroup is out of quota waits aside, neither run nor sent to user space */
	if (bw_active() && bw_hold_if_throttled(p, tctx, enq_flags))
		return;
	/*
	 * SCX_OPS_ENQ_LAST: ops.dispatch found nothing else for this CPU and did not extend the task's
	 * slice, which it does for every task but the scheduler and a throttled one (held above).
	 * Without the flag the kernel would run the task on a fresh 20 ms slice, and a cgroup out of
	 * quota would keep its CPU.
	 */
	if (enq_flags & SCX_ENQ_LAST) {
		pyl_dsq_insert(p, SCX_DSQ_LOCAL, cfg.slice_ns, enq_flags);
		return;
	}
	if (cfg.steer)
		steer_enqueue(p, tctx, enq_flags);
	else
		roundtrip_enqueue(p, tctx, enq_flags, first, yielded);
}

/*
 * Does a task placed with `deadline` on `cpu` preempt the task running there? When its deadline is
 * earlier by more than one BPF slice. A decision arrives a Python round trip after its task left
 * the CPU, and meanwhile that CPU took someone else for a whole slice: a task pinned there would
 * lose that slice every time, and its vruntime lead would never buy it the CPU back. The margin
 * keeps two tasks with nearly equal deadlines from preempting each other on every decision.
 */
static __always_inline bool deadline_passes_running(s32 cpu, u64 deadline)
{
	struct cpu_ctx *cctx = lookup_cpu_ctx(cpu);

	return cctx && cctx->running_deadline &&
	       (s64)(deadline + cfg.slice_ns - cctx->running_deadline) < 0;
}

/*
 * The CPU a PYLAND_CPU_ANY decision wakes: an idle one the task may use, else its previous CPU.
 * pick_idle_cpu claims the CPU (clears its idle bit), so the caller must kick it. Built-in DSQs
 * cannot kick: the task goes to that CPU's local DSQ instead, which wakes it, where it may move.
 */
static __always_inline s32 any_cpu(struct task_struct *p, u64 *dsq)
{
	s32 cpu = pyl_pick_idle_cpu(p->cpus_ptr, 0);

	if (cpu < 0)
		return scx_bpf_task_cpu(p);
	if (!pyl_custom_dsqs()) {
		if (cpu != scx_bpf_task_cpu(p) && migration_disabled(p))
			return scx_bpf_task_cpu(p);
		*dsq = cpu_dsq(cpu);
	}
	__sync_fetch_and_add(&shared.nr_idle_picks, 1);
	return cpu;
}

/*
 * What one drain in ops.dispatch did: the decisions it put into the dispatch buffer. The count lives
 * in a map value, which the verifier does not track: a count on the stack, compared where the kernel
 * cannot count dispatch slots, is a new verifier state at every callback iteration.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} drain_inserted SEC(".maps");

struct drain_ctx {
	u32 *inserted;
};

/*
 * What a decision says of its task for later: its vtime and deadline (the BPF-side fallbacks
 * reuse them), its slice (clamped to the budget: a longer one would hold a CPU past every
 * deadline), and, for a wake-up's decision only, the direct wake-up grant (a decision for a
 * preempted or slice-expired task must not withdraw it).
 */
static __always_inline void store_decision(struct task_ctx *tctx, const struct pyland_decision *d)
{
	u64 slice = d->slice_ns ?: cfg.slice_ns;	/* R5 */

	tctx->vtime = d->vtime;
	tctx->deadline = d->deadline;
	track_deadline_lead(d->deadline);
	if (slice > cfg.max_slice_ns) {
		slice = cfg.max_slice_ns;
		__sync_fetch_and_add(&shared.nr_clamped, 1);
	}
	tctx->slice = slice;
	if (d->enq_cnt == tctx->wake_gen)
		tctx->direct_wake = d->flags & PYLAND_DECISION_DIRECT_WAKE;
}

/* the CPU a decision places its task on, and that CPU's DSQ (or the shared one) in *dsq */
static __always_inline s32 decision_target(struct task_struct *p, const struct pyland_decision *d, u64 *dsq)
{
	s32 target = d->cpu;

	if (target < PYLAND_CPU_ANY || target >= (s32)scx_bpf_nr_cpu_ids())
		__sync_fetch_and_add(&shared.nr_malformed, 1);	/* then bounced below */
	if (p->nr_cpus_allowed == 1) {
		/* a pinned task can only run where it is; user space may not know that yet */
		target = scx_bpf_task_cpu(p);
		*dsq = cpu_dsq(target);
		return target;
	}
	if (target == PYLAND_CPU_ANY) {
		*dsq = shared_dsq();
		return any_cpu(p, dsq);
	}
	/*
	 * Into another CPU's local DSQ the kernel moves the task at once, and ejects the scheduler if
	 * the task may not migrate; pyland's own DSQs are taken from only by a CPU the task can run on.
	 */
	if (target >= 0 && target < MAX_CPUS && bpf_cpumask_test_cpu(target, p->cpus_ptr) &&
	    (pyl_custom_dsqs() || target == scx_bpf_task_cpu(p) || !migration_disabled(p))) {
		*dsq = cpu_dsq(target);
		return target;
	}
	__sync_fetch_and_add(&shared.nr_bounced, 1);
	*dsq = shared_dsq();
	return scx_bpf_task_cpu(p);
}

/*
 * R4: a PREEMPT request is always honoured: no "ran for less than X" guard that would drop it
 * without retry (it would drop the fast wake-ups of a ping-pong). Without one, a deadline more
 * than a slice earlier than the running task's still preempts it (deadline_passes_running);
 * otherwise an idle target is woken.
 */
static __always_inline void kick_decided(const struct pyland_decision *d, s32 target)
{
	if (!pyl_can_kick() || target == bpf_get_smp_processor_id())
		return;
	if (d->flags & PYLAND_DECISION_PREEMPT) {
		pyl_kick_cpu(target, SCX_KICK_PREEMPT);
		__sync_fetch_and_add(&shared.nr_preempt_kicks, 1);
	} else if (deadline_passes_running(target, d->deadline)) {
		pyl_kick_cpu(target, SCX_KICK_PREEMPT);
		__sync_fetch_and_add(&shared.nr_deadline_preempts, 1);
	} else {
		pyl_kick_cpu(target, SCX_KICK_IDLE);
	}
}

/* Apply one decision: its task into the DSQ it names, unless the decision is stale or placed. */
static void apply_decision(const struct pyland_decision *d, struct drain_ctx *dctx)
{
	struct task_struct *p;
	struct task_ctx *tctx;
	u64 dsq, enq_flags = 0;
	s32 target;

	p = bpf_task_from_pid(d->pid);
	if (!p) {
		__sync_fetch_and_add(&shared.nr_missing, 1);
		return;
	}
	tctx = lookup_task_ctx(p);
	if (!tctx || d->enq_cnt != tctx->enq_cnt) {
		/* R7: stale generation, the task was re-enqueued: its newer record gets a decision */
		__sync_fetch_and_add(&shared.nr_stale, 1);
		goto release;
	}
	store_decision(tctx, d);
	if (tctx->direct_gen == d->enq_cnt) {
		/* placed by BPF (a granted wake-up, a cut slice): only the vtime and grant change */
		__sync_fetch_and_add(&shared.nr_wake_updates, 1);
		goto release;
	}
	/* the cgroup ran out of quota while the policy decided: the task waits aside after all */
	if (bw_active() && bw_hold_if_throttled(p, tctx, 0)) {
		(*dctx->inserted)++;
		goto release;
	}
	target = decision_target(p, d, &dsq);
	/*
	 * Without kicks, on built-in DSQs, an insert into another CPU's local DSQ wakes that CPU if
	 * idle, and SCX_ENQ_PREEMPT ends its current task's slice: R4's preemption, where the task is
	 * placed on a CPU. Deadline preemption is left out: in a FIFO DSQ the task would not be next,
	 * only the running task would lose its slice.
	 */
	if (!pyl_can_kick() && !pyl_custom_dsqs() && target != bpf_get_smp_processor_id() &&
	    dsq != shared_dsq() && (d->flags & PYLAND_DECISION_PREEMPT)) {
		enq_flags = SCX_ENQ_PREEMPT;
		__sync_fetch_and_add(&shared.nr_preempt_kicks, 1);
	}
	/*
	 * If the task was dequeued after the generation check, the kernel's own queue-sequence check
	 * drops this insert when the dispatch buffer is flushed: no double run.
	 */
	insert_ordered(p, tctx, dsq, tctx->slice, d->deadline, pyl_now(), enq_flags);
	(*dctx->inserted)++;
	__sync_fetch_and_add(&shared.nr_dispatched, 1);
	kick_decided(d, target);
release:
	bpf_task_release(p);
}

/*
 * One record of the `dispatched` user ring (bpf_user_ringbuf_drain() in ops.dispatch): an update
 * (the longer record) or a decision. Returns 1, stop draining, when this CPU has no dispatch slot
 * left: a further insert would overflow the dispatch buffer, which the kernel treats as an error.
 */
static long drain_one(struct bpf_dynptr *dynptr, struct drain_ctx *dctx)
{
	const struct pyland_update *u = bpf_dynptr_data(dynptr, 0, sizeof(*u));
	const struct pyland_decision *d;

	if (u) {	/* only changes what later enqueues are placed by: no slot used */
		apply_update(u);
		return 0;
	}
	d = bpf_dynptr_data(dynptr, 0, sizeof(*d));
	if (!d) {
		/* shorter than a decision: nothing in it can be trusted, not even the pid */
		__sync_fetch_and_add(&shared.nr_malformed, 1);
		return 0;
	}
	apply_decision(d, dctx);
	return pyl_dispatch_slot_left(*dctx->inserted) ? 0 : 1;
}

/*
 * Starvation rescue. The DSQs are ordered by the policy's deadlines, and a policy may keep giving
 * newcomers earlier deadlines than a waiting task (a flood of boosted, preempting wake-ups against
 * a CPU hog). Every RESCUE_PERIOD_NS one dispatch looks at a DSQ and runs the task that has waited
 * longest, if that is starve_ns, so the policy's ordering cannot turn into a watchdog ejection. A
 * rescued task goes to the head of the local DSQ: at its tail, a stream of granted wake-ups
 * inserted at the head would keep it waiting still.
 *
 * The whole DSQ, and the longest wait first: a starving task has an unknown number of tasks ahead
 * of it (those that passed it) and behind it (later arrivals, some rescued before and young
 * again), so neither end of the DSQ is where it waits, and the first starving task a scan meets
 * may be the one that started waiting last. RESCUE_SCAN_MAX bounds the cost: a DSQ longer than
 * that is watched in its first RESCUE_SCAN_MAX tasks only.
 *
 * One task per period is a trickle against an overload, which can leave starving tasks faster
 * than that. So while a CPU's scan finds starving tasks (cpu_ctx.starving), every dispatch there
 * scans, and no wake-up is granted a place ahead of them on that CPU (direct_wake_allowed), until
 * a scan finds none.
 */
static __always_inline bool may_rescue_here(struct task_struct *p, s32 this_cpu)
{
	/*
	 * Only to a CPU the task may use: moving it to a local DSQ it is not allowed on (or while
	 * it is migration-disabled) is a scheduler error the kernel ejects us for.
	 */
	return bpf_cpumask_test_cpu(this_cpu, p->cpus_ptr) && !migration_disabled(p);
}

/* the task a rescue scan chose: the longest wait seen so far, at least starve_ns */
struct rescue_pick {
	u64 dsq_id;
	u64 waited;
	s32 pid;	/* 0: none found */
};

/* the task of `dsq_id` this CPU may run that has waited longest, if longer than pick's */
static void longest_waiting(u64 dsq_id, u64 now, s32 this_cpu, struct rescue_pick *pick)
{
	struct bpf_iter_scx_dsq it;
	struct task_struct *p;
	int i;

	pyl_iter_dsq_new(&it, dsq_id, 0);
	/* bpf_for bounds the scan for the verifier's sake: see bw_release_held */
	bpf_for(i, 0, RESCUE_SCAN_MAX) {
		struct task_ctx *tctx;
		u64 waited;

		p = bpf_iter_scx_dsq_next(&it);
		if (!p)
			break;
		tctx = lookup_task_ctx(p);
		if (!tctx)
			continue;
		waited = pyl_elapsed(now, tctx->dsq_at);
		if (waited >= pick->waited && may_rescue_here(p, this_cpu)) {
			pick->waited = waited;
			pick->pid = p->pid;
			pick->dsq_id = dsq_id;
		}
	}
	bpf_iter_scx_dsq_destroy(&it);
}

/*
 * The task a first scan chose, moved by a second: a DSQ move takes the task its iterator has just
 * returned. Between the two scans the task may have been taken by another CPU or dequeued: then
 * the second scan does not find it (or the move fails), and nothing is rescued this time.
 */
static int rescue_starved(u64 dsq_id, s32 pid, s32 this_cpu)
{
	struct bpf_iter_scx_dsq it;
	struct task_struct *p;
	int i, rescued = 0;

	pyl_iter_dsq_new(&it, dsq_id, 0);
	bpf_for(i, 0, RESCUE_SCAN_MAX) {
		p = bpf_iter_scx_dsq_next(&it);
		if (!p)
			break;
		if (p->pid != pid)
			continue;
		/* checked again: the task's affinity may have changed since the first scan */
		if (may_rescue_here(p, this_cpu) && pyl_dsq_move(&it, p, SCX_DSQ_LOCAL, SCX_ENQ_HEAD)) {
			__sync_fetch_and_add(&shared.nr_rescued, 1);
			rescued = 1;	/* one per dispatch: it runs next on this CPU */
		}
		break;
	}
	bpf_iter_scx_dsq_destroy(&it);
	return rescued;
}

/* the deadline of the first task of a vtime-ordered DSQ; false when it is empty */
static __always_inline bool dsq_head_deadline(u64 dsq_id, u64 *deadline)
{
	struct bpf_iter_scx_dsq it;
	struct task_struct *p;

	pyl_iter_dsq_new(&it, dsq_id, 0);
	p = bpf_iter_scx_dsq_next(&it);
	if (p)
		*deadline = p->scx.dsq_vtime;
	bpf_iter_scx_dsq_destroy(&it);
	return p != NULL;
}

/*
 * Both DSQs are ordered by the policy's deadlines, which share one vtime scale. Taking this CPU's
 * DSQ first whatever its deadlines would make a task pinned here win every time against the tasks any
 * CPU could run, and the unpinned ones make up the difference elsewhere only if there is room.
 * A head can be taken by another CPU between this look and the move: the move then takes the
 * next task of that DSQ, or the caller falls through to the other DSQ.
 */
static __always_inline bool shared_dsq_first(s32 cpu)
{
	u64 local = 0, any = 0;

	if (!dsq_head_deadline(SHARED_DSQ, &any))
		return false;
	if (!dsq_head_deadline(cpu_dsq(cpu), &local))
		return true;
	return (s64)(any - local) < 0;
}

/*
 * R3 (1): finished decisions first. Running the scheduler before its decisions were applied makes
 * it decide again while the tasks it already placed still wait. Returns the tasks it inserted.
 */
static __always_inline u32 drain_decisions(void)
{
	u32 zero = 0;
	struct drain_ctx dctx = { .inserted = bpf_map_lookup_elem(&drain_inserted, &zero) };
	long drained;

	if (!dctx.inserted)	/* never: a one-entry array always has its entry */
		return 0;
	*dctx.inserted = 0;
	if (pyl_dispatch_slot_left(0)) {
		drained = bpf_user_ringbuf_drain(&dispatched, drain_one, &dctx, 0);
		if (drained == -EBUSY)
			__sync_fetch_and_add(&shared.nr_drain_busy, 1);
	}
	return *dctx.inserted;
}

/*
 * Nothing else wants this CPU: the previous task goes on, with the BPF slice (R5), instead of the
 * kernel's 20 ms default refill and instead of a pointless round trip to Python.
 */
static __always_inline bool keep_running(struct task_struct *prev)
{
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED) && !is_usersched(prev) && !bw_task_throttled(prev)) {
		pyl_set_slice(prev, cfg.slice_ns);
		return true;
	}
	return false;
}

/*
 * This CPU found nothing to run and goes idle, but the idle mask says so only once it is there: a
 * task inserted meanwhile finds no idle CPU to kick and waits for some CPU's next dispatch (a
 * slice, 3.8 ms in a trace of schbench under TCG, the other CPU idle throughout). kick_for kicks
 * the CPU marked here instead; ops.running clears the mark.
 */
static __always_inline void note_going_idle(s32 cpu, struct cpu_ctx *cctx)
{
	if (!cctx)
		return;
	cctx->going_idle = true;
	shared.idle_hint = cpu;
}

/*
 * A task about to trip the watchdog goes before everything else (see rescue_starved). Each CPU
 * scans at a period of its own, and looks at both DSQs it takes from, for the longest wait among
 * the tasks it may run:
 * - one period for the machine let the CPUs that dispatch more often take most scans, and only
 *   this CPU can run the tasks pinned here;
 * - the shared DSQ holds tasks pinned to one CPU too (placed by BPF, or bounced), and a scan of
 *   this CPU's DSQ alone, preferred whenever it found a starving task there, let a task pinned
 *   here wait in the shared DSQ until the watchdog while a mob starved in this CPU's DSQ.
 * True when a task was rescued onto this CPU.
 */
static __always_inline bool rescue_due(s32 cpu, struct cpu_ctx *cctx, u64 now)
{
	struct rescue_pick pick = { .waited = cfg.starve_ns };
	bool rescued;

	if (!cctx || !(cctx->starving || pyl_elapsed(now, cctx->rescue_scan_at) >= RESCUE_PERIOD_NS))
		return false;
	cctx->rescue_scan_at = now;
	shared.rescue_scan_at = now;
	longest_waiting(cpu_dsq(cpu), now, cpu, &pick);
	longest_waiting(SHARED_DSQ, now, cpu, &pick);
	rescued = pick.pid && rescue_starved(pick.dsq_id, pick.pid, cpu);
	cctx->starving = rescued;
	shared.starving = rescued;
	return rescued;
}

/*
 * R3 (3), (4): this CPU's DSQ and the shared DSQ, the earlier deadline first. Each step returns
 * only when a task was really moved: a move can find the DSQ empty (another CPU took its head).
 */
static __always_inline bool take_earliest(s32 cpu)
{
	/* no task pinned here waits (the common case): no deadlines to compare, no DSQ walk */
	if (!pyl_dsq_nr_queued(cpu_dsq(cpu)))
		return pyl_dsq_move_to_local(SHARED_DSQ);
	if (shared_dsq_first(cpu))
		return pyl_dsq_move_to_local(SHARED_DSQ) || pyl_dsq_move_to_local(cpu_dsq(cpu));
	return pyl_dsq_move_to_local(cpu_dsq(cpu)) || pyl_dsq_move_to_local(SHARED_DSQ);
}

void BPF_STRUCT_OPS(pyland_dispatch, s32 cpu, struct task_struct *prev)
{
	struct cpu_ctx *cctx = lookup_cpu_ctx(cpu);
	u32 inserted = drain_decisions();
	u64 now;

	if (!pyl_custom_dsqs()) {
		/*
		 * Built-in DSQs: the kernel found this CPU's local DSQ and the global DSQ empty before
		 * calling here, and takes what the drain put there itself; the scheduler is in a local
		 * DSQ already. The previous task goes on only if the drain added nothing: its slice
		 * left would make the kernel keep it ahead of what was just inserted.
		 */
		if (!inserted && !keep_running(prev))
			note_going_idle(cpu, cctx);
		if (cctx)
			cctx->served_at = pyl_now();	/* the kernel takes from the DSQs after this */
		return;
	}
	/*
	 * cpu.max: held tasks whose cgroups have budget again join the shared DSQ. Not gated on
	 * bw_active(): when the last quota goes (cpu.max "max") nr_bw_cgroups is 0 while its tasks
	 * are still held, and only this release frees them (it returns at once unless asked).
	 */
	if (pyl_cgroup_bw())
		bw_release_held(bpf_ktime_get_ns());
	now = pyl_now();
	/* before a rescue, and even right after a turn of its own: see policy_watched */
	if (policy_watched() && pyl_dsq_move_to_local(SCHED_DSQ)) {
		__sync_fetch_and_add(&shared.nr_watched_turns, 1);
		if (cctx)
			cctx->loop_owed = true;
		return;
	}
	if (rescue_due(cpu, cctx, now)) {
		if (cctx)
			cctx->served_at = now;
		return;
	}
	/*
	 * R3 (2): then the scheduler, if it has work (or reports waiting a period). Not twice in a row
	 * on this CPU, though: when the scheduler itself just stopped here, one task of this CPU's DSQ
	 * or of the shared DSQ gets its turn first -- under a constant stream of work "pending" is
	 * always true, and tasks placed here would starve behind the scheduler until the watchdog.
	 */
	if (!(prev && is_usersched(prev)) && (usersched_has_pending() || reports_due(now)) &&
	    pyl_dsq_move_to_local(SCHED_DSQ)) {
		if (cctx)	/* a turn owed, not one in a gap: no wake-up cuts it (wake_preempts) */
			cctx->loop_owed = true;
		return;
	}
	if (cctx)	/* taken from, or found empty: served either way (direct_wake_allowed) */
		cctx->served_at = now;
	if (take_earliest(cpu))
		return;
	/* a scheduler woken without pending work (stats, exit checks) runs when nothing else does */
	if (pyl_dsq_move_to_local(SCHED_DSQ))
		return;
	if (!keep_running(prev))
		note_going_idle(cpu, cctx);
}

void BPF_STRUCT_OPS(pyland_runnable, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx;

	if (is_usersched(p) || !(enq_flags & SCX_ENQ_WAKEUP))
		return;
	tctx = lookup_task_ctx(p);
	if (!tctx)
		return;
	tctx->exec_runtime = 0;	/* woke up: CPU time since the last sleep starts again */
	tctx->nr_wakeups++;
	if (tctx->stop_ts)
		tctx->sleep_ns += pyl_elapsed(pyl_now(), tctx->stop_ts);	/* stopped on another CPU */
}

void BPF_STRUCT_OPS(pyland_running, struct task_struct *p)
{
	struct cpu_ctx *cctx = lookup_cpu_ctx(scx_bpf_task_cpu(p));
	struct task_ctx *tctx;

	/* the scheduler and kthreads are never preempted for a deadline (deadline_passes_running) */
	if (cctx) {
		cctx->running_deadline = 0;
		cctx->going_idle = false;
		cctx->running_loop = false;
	}
	if (is_usersched(p)) {
		if (cctx && !pyl_custom_dsqs())
			cctx->usersched_queued = false;
		/*
		 * Steer mode owes no task a decision but the sync ones, which wake_preempts checks
		 * for: a turn the scheduler took because this CPU had nothing else (the last branch
		 * of ops.dispatch) yields to a wake-up. Custom DSQs only: with the built-in ones it
		 * is woken to the head of a local DSQ, never through ops.dispatch.
		 */
		if (cctx) {
			cctx->running_loop = cfg.steer && pyl_custom_dsqs() && !cctx->loop_owed;
			cctx->loop_owed = false;
		}
		shared.usersched_last_run_at = pyl_now();
		__sync_fetch_and_add(&shared.nr_usersched_runs, 1);
		return;
	}
	tctx = lookup_task_ctx(p);
	if (!tctx)
		return;
	tctx->start_ts = pyl_now();
	tctx->bw_charged_exec = p->se.sum_exec_runtime;
	if (cctx && !is_critical_kthread(p))
		cctx->running_deadline = tctx->deadline;
	if (cfg.steer) {
		steer_running(p, tctx, cctx);
		return;
	}
	/* racy max across CPUs: a lost update only places the next new task one deadline earlier */
	if ((s64)(tctx->deadline - shared.vtime_now) > 0)
		shared.vtime_now = tctx->deadline;
}

/* the CPU time of the run that began at start_ts, up to now, into what the next record carries */
static __always_inline void account_run(struct task_struct *p, struct task_ctx *tctx, u64 now)
{
	if (now > tctx->start_ts) {
		tctx->exec_runtime += now - tctx->start_ts;
		tctx->run_ns += now - tctx->start_ts;
		if (cfg.steer)
			steer_charge(p, tctx, now - tctx->start_ts);
	}
}

void BPF_STRUCT_OPS(pyland_stopping, struct task_struct *p, bool runnable)
{
	struct cpu_ctx *cctx = lookup_cpu_ctx(scx_bpf_task_cpu(p));
	struct task_ctx *tctx;
	u64 now;

	if (cctx) {	/* nothing to preempt here until the next task runs */
		cctx->running_deadline = 0;
		cctx->running_loop = false;
	}
	if (is_usersched(p))
		return;
	tctx = lookup_task_ctx(p);
	if (!tctx)
		return;
	now = pyl_now();
	tctx->stop_ts = now;
	account_run(p, tctx, now);
	/*
	 * Going to sleep ends a burst. The shortest one tells the policy what an average hides: a
	 * task that alternates long and short bursts is waited on by someone, one whose every
	 * burst is long is not.
	 */
	if (!runnable && (!tctx->min_burst_ns || tctx->exec_runtime < tctx->min_burst_ns))
		tctx->min_burst_ns = tctx->exec_runtime ?: 1;
	if (bw_active())
		bw_charge(p, tctx, bpf_ktime_get_ns());
	if (cfg.steer && steer_report_due(tctx, now))
		steer_report(p, tctx, now);
}

/*
 * Is the scheduler waiting for a CPU? Built-in DSQs: in this CPU's local DSQ (a thread moved away
 * without running leaves the flag set until one runs here: a spare yield per tick at most). Else
 * in SCHED_DSQ, which a kernel that cannot count it is assumed to hold.
 */
static __always_inline bool usersched_waits(s32 cpu)
{
	struct cpu_ctx *cctx;

	if (!pyl_custom_dsqs()) {
		cctx = lookup_cpu_ctx(cpu);
		return cctx && cctx->usersched_queued;
	}
	if (!bpf_ksym_exists(scx_bpf_dsq_nr_queued___pyl))
		return true;
	return pyl_dsq_nr_queued(SCHED_DSQ) > 0;
}

void BPF_STRUCT_OPS(pyland_tick, struct task_struct *p)
{
	struct task_ctx *tctx;
	u64 now;

	learn_entry_migration_depth(p);	/* p is the current task here */
	if (is_usersched(p))
		return;
	/* cpu.max: charge the running task, and stop it if that used up its cgroup's quota */
	if (bw_active() && (tctx = lookup_task_ctx(p)) && bw_tick(p, tctx))
		return;
	/*
	 * A report from here carries the run going on, which then counts from now: a task that never
	 * stops (alone on its CPU, its slice extended) would otherwise report no CPU time at all, and
	 * a shorter burst than it runs. Steer mode only, where records frame no run by start_ts.
	 */
	if (cfg.steer && (tctx = lookup_task_ctx(p)) && steer_report_due(tctx, (now = pyl_now()))) {
		account_run(p, tctx, now);
		tctx->start_ts = now;
		steer_report(p, tctx, now);
	}
	/*
	 * The scheduler is runnable and waiting with work to do: end the current slice now so this
	 * CPU goes through ops.dispatch, which runs the scheduler first (built-in DSQs: the kernel
	 * runs it next, from the head of the local DSQ).
	 */
	if (usersched_waits(scx_bpf_task_cpu(p)) &&
	    (usersched_has_pending() || reports_due(pyl_now()) || policy_watched())) {
		pyl_set_slice(p, 0);
		if ((tctx = lookup_task_ctx(p)))
			tctx->yielded = true;
		__sync_fetch_and_add(&shared.nr_tick_yields, 1);
	}
}

void BPF_STRUCT_OPS(pyland_enable, struct task_struct *p)
{
	__sync_fetch_and_add(&shared.nr_enabled, 1);
}

void BPF_STRUCT_OPS(pyland_disable, struct task_struct *p)
{
	__sync_fetch_and_sub(&shared.nr_enabled, 1);
}

s32 BPF_STRUCT_OPS(pyland_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	struct task_ctx *tctx = bpf_task_storage_get(&task_ctx_stor, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	u64 gen;

	if (!tctx)
		return -ENOMEM;
	/*
	 * A restart attaches this object again, and the task's storage outlives the last attachment:
	 * start it afresh, but with a newer generation, so that a decision the loop wrote for the last
	 * attachment and BPF never read can never match the task's next enqueue.
	 */
	gen = tctx->enq_cnt + 1;
	__builtin_memset(tctx, 0, sizeof(*tctx));
	tctx->enq_cnt = gen;
	/* steer: no credit for being new, and a first report once it has lived a report period */
	tctx->vruntime = shared.vruntime_now;
	tctx->record_at = pyl_now();
	/*
	 * args->cgroup is a plain pointer to the verifier, which the ancestor walk refuses: the
	 * cgroup is looked up again by id, a reference the walk accepts.
	 */
	if (pyl_cgroup_bw() && args->cgroup) {
		struct cgroup *cgrp = bpf_cgroup_from_id___pyl(args->cgroup->kn->id);

		if (cgrp) {
			bw_set_chain(tctx, cgrp);
			bpf_cgroup_release___pyl(cgrp);
		}
	}
	return 0;
}

/*
 * cpu.max (cgroup_bw.h). The kernel calls cgroup_init for every cgroup when pyland attaches and for
 * each new one, with its cpu.max; cgroup_set_bandwidth when cpu.max is written. Before 6.17 neither
 * carries the bandwidth, and cgroup_set_bandwidth is not in the kernel's sched_ext_ops: libbpf
 * leaves that callback out, and these only keep the tasks' cgroups for the records.
 */
s32 BPF_STRUCT_OPS(pyland_cgroup_init, struct cgroup *cgrp, struct scx_cgroup_init_args *args)
{
	if (pyl_cgroup_bw())
		bw_set(cgrp->kn->id, BPF_CORE_READ(args, bw_period_us), BPF_CORE_READ(args, bw_quota_us),
		       BPF_CORE_READ(args, bw_burst_us));
	return 0;
}

void BPF_STRUCT_OPS(pyland_cgroup_exit, struct cgroup *cgrp)
{
	bw_forget(cgrp->kn->id);
}

void BPF_STRUCT_OPS(pyland_cgroup_move, struct task_struct *p, struct cgroup *from, struct cgroup *to)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (tctx && pyl_cgroup_bw())
		bw_set_chain(tctx, to);
}

void BPF_STRUCT_OPS(pyland_cgroup_set_bandwidth, struct cgroup *cgrp, u64 period_us, u64 quota_us,
		    u64 burst_us)
{
	bw_set(cgrp->kn->id, period_us, quota_us, burst_us);
}

/* task_struct.__state bits (include/linux/sched.h): defines, so not in vmlinux.h */
#define PYL_TASK_UNINTERRUPTIBLE	0x2
#define PYL_TASK_STOPPED_OR_TRACED	(0x4 | 0x8)

/*
 * The exit message of check_progress, by what the loop thread was doing when it gave up: waiting
 * for a CPU is this scheduler failing its own process, asleep or blocked in the kernel is user
 * space waiting on something else (a lock, I/O), stopped is a debugger or SIGSTOP. Four formats,
 * since the message takes numbers only.
 */
static __always_inline char *no_progress_fmt(void)
{
	static char waiting[] = "pyland: user space made no progress for %llu ms with work pending "
				"(its loop thread was waiting for a CPU)";
	static char asleep[] = "pyland: user space made no progress for %llu ms with work pending "
			       "(its loop thread was asleep)";
	static char blocked[] = "pyland: user space made no progress for %llu ms with work pending "
				"(its loop thread was blocked in the kernel)";
	static char stopped[] = "pyland: user space made no progress for %llu ms with work pending "
				"(its loop thread was stopped)";
	struct task_struct *p = bpf_task_from_pid(cfg.usersched_tgid);	/* the main thread */
	unsigned int state;
	bool running;

	if (!p)
		return waiting;	/* never: the process outlives its attachment */
	state = p->__state;
	/* a kfunc, not task_struct.on_cpu, whose type differs between kernels (CO-RE cannot relocate it) */
	running = scx_bpf_task_running(p);
	bpf_task_release(p);
	if (state & PYL_TASK_STOPPED_OR_TRACED)
		return stopped;
	if (state & PYL_TASK_UNINTERRUPTIBLE)
		return blocked;
	if (state)
		return asleep;
	/* runnable: on a CPU here means it runs now, after the whole bound off one */
	return running ? asleep : waiting;
}

/*
 * The backstop for a user space that cannot act: its own watchdog detaches pyland when the policy
 * overruns its budget, but a process stopped (SIGSTOP), or stuck in native code that holds the
 * interpreter lock, runs no watchdog. Pending work with no record consumed, or a policy running,
 * for PROGRESS_BUDGETS budgets stops pyland here: the kernel's watchdog would wait timeout_ms (5 s)
 * with every task handed to user space stranded. Wall time, so not at the user-space watchdog's
 * budget: a loop kept off-CPU for a while (a CPU going offline) is not stuck.
 */
static void check_progress(void)
{
	u64 now = bpf_ktime_get_ns(), consumed = shared.nr_consumed;
	unsigned long long arg[1];

	/*
	 * The clock starts when user space stamps progress_at as its loop begins: ops.init arms this
	 * timer at the start of the attach, and records queue while the kernel moves every task over,
	 * with the loop still waiting for its attach call to return, which on a busy host can take
	 * longer than the bound.
	 */
	if (!cfg.stall_ns || !shared.progress_at)
		return;
	if (consumed != shared.progress_seen || !usersched_has_pending()) {
		shared.progress_seen = consumed;
		shared.progress_at = now;
	}
	arg[0] = pyl_elapsed(now, shared.progress_at) / 1000000;	/* user space may stamp after `now` */
	if (policy_stalled(now, PROGRESS_BUDGETS * cfg.stall_ns)) {
		arg[0] = (now - shared.policy_since) / 1000000;	/* the policy's overrun */
		pyl_exit(PYLAND_EXIT_STALLED, no_progress_fmt(), arg, sizeof(arg));
	} else if (pyl_elapsed(now, shared.progress_at) > PROGRESS_BUDGETS * cfg.stall_ns) {
		pyl_exit(PYLAND_EXIT_STALLED, no_progress_fmt(), arg, sizeof(arg));
	}
}

/*
 * Tell the watchdog thread of a policy call past half its budget, once per call (policy_since is
 * the call's stamp). It measures the rest itself, leaving out the time the loop waited for a CPU,
 * which this wall-clock test cannot tell from a policy running. A full ring means the watchdog has
 * an alarm it has not read yet, so it is awake already; the next beat tries again anyway.
 */
static void alarm_watchdog(void)
{
	u64 since = shared.policy_since;
	u64 *rec;

	if (!since || since == shared.policy_alarmed || !policy_stalled(bpf_ktime_get_ns(), cfg.stall_ns / 2))
		return;
	rec = bpf_ringbuf_reserve(&alarms, sizeof(*rec), 0);
	if (!rec)
		return;
	*rec = since;
	bpf_ringbuf_submit(rec, 0);	/* wakes the watchdog: it waits for nothing else */
	shared.policy_alarmed = since;
	__sync_fetch_and_add(&shared.nr_policy_alarms, 1);
}

/*
 * R9: heartbeat. Nothing notifies the kernel when user space writes decisions, and a scheduler
 * that is runnable but never picked would let the watchdog eject pyland. Every timer_ns, if work
 * is pending and the scheduler has not run for a period, kick a CPU into ops.dispatch: an idle one
 * if there is one, else preempt the CPU the scheduler last used.
 */
static int heartbeat_fn(void *map, int *key, struct heartbeat *hb)
{
	u64 now = pyl_now();
	struct task_struct *p;

	check_progress();
	alarm_watchdog();

	/*
	 * Without kicks there is nothing to do here: the scheduler then waits in a local DSQ, which
	 * the kernel serves in order, within a slice of the task running there (see pyland_enqueue).
	 */
	if (pyl_can_kick() && (usersched_has_pending() || policy_watched()) &&
	    pyl_elapsed(now, shared.usersched_last_run_at) >= cfg.timer_ns) {
		p = bpf_task_from_pid(cfg.usersched_tgid);
		if (p) {
			s32 cpu;

			/*
			 * Kernels 6.16 and 6.17 verify this callback as part of the sleepable ops.init
			 * that armed the timer, so it is not an RCU read-side section there and
			 * p->cpus_ptr, an RCU-protected pointer, is refused as the idle mask ("R1 must
			 * be a rcu pointer"). The explicit read lock makes it one on every kernel.
			 */
			bpf_rcu_read_lock();
			cpu = pyl_pick_idle_cpu(p->cpus_ptr, 0);
			bpf_rcu_read_unlock();

			if (cpu >= 0)
				pyl_kick_cpu(cpu, SCX_KICK_IDLE);
			else
				pyl_kick_cpu(scx_bpf_task_cpu(p), SCX_KICK_PREEMPT);
			bpf_task_release(p);
			__sync_fetch_and_add(&shared.nr_timer_kicks, 1);
		}
	}
	bpf_timer_start(&hb->timer, cfg.timer_ns, 0);
	return 0;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(pyland_init)
{
	struct heartbeat *hb;
	u32 key = 0, nr_cpus = scx_bpf_nr_cpu_ids();
	s32 err;
	u32 i;

	shared.compat_missing = pyl_compat_missing();
	/* without it the scheduler's own threads would queue behind the tasks they must decide */
	if (!cfg.usersched_tgid) {
		scx_bpf_error("pyland: loaded without the scheduler's TGID");
		return -EINVAL;
	}
	if (nr_cpus > MAX_CPUS) {
		scx_bpf_error("pyland: %u CPUs, at most %d supported", nr_cpus, MAX_CPUS);
		return -E2BIG;
	}
	/* an attachment after a restart finds the last one's per-CPU state in the map */
	bpf_for(i, 0, nr_cpus) {
		struct cpu_ctx *cctx = lookup_cpu_ctx(i);

		if (cctx)
			__builtin_memset(cctx, 0, sizeof(*cctx));
	}
	/* without them pyland runs on the built-in DSQs (see the top of this file) */
	if (pyl_custom_dsqs()) {
		bpf_for(i, 0, nr_cpus) {
			err = pyl_create_dsq(cpu_dsq(i), -1);
			if (err)
				return err;
		}
		err = pyl_create_dsq(SHARED_DSQ, -1);
		if (err)
			return err;
		err = pyl_create_dsq(SCHED_DSQ, -1);
		if (err)
			return err;
	}

	err = bw_init();
	if (err)
		return err;

	hb = bpf_map_lookup_elem(&heartbeat_map, &key);
	if (!hb)
		return -ENOMEM;
	/* -EBUSY on a restart's attachment: the timer was set up by the first, and ops.exit stopped it */
	bpf_timer_init(&hb->timer, &heartbeat_map, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&hb->timer, heartbeat_fn);
	return bpf_timer_start(&hb->timer, cfg.timer_ns, 0);
}

/* R9: why the scheduler left, for user space to report (UEI-style copy of struct scx_exit_info) */
void BPF_STRUCT_OPS(pyland_exit, struct scx_exit_info *ei)
{
	struct heartbeat *hb;
	u32 key = 0;

	/*
	 * The timers belong to the object, which a restart attaches again: stopped here, they cannot
	 * fire between two attachments, where the heartbeat would judge a loop that is not running
	 * and could end the next attachment before it began. No callback re-arms them after this:
	 * the kernel calls ops.exit once every other callback of this attachment has returned, and
	 * bpf_timer_cancel() waits for a running timer callback.
	 */
	hb = bpf_map_lookup_elem(&heartbeat_map, &key);
	if (hb)
		bpf_timer_cancel(&hb->timer);
	bw_stop();

	bpf_probe_read_kernel_str(shared.exit.reason, sizeof(shared.exit.reason), ei->reason);
	bpf_probe_read_kernel_str(shared.exit.msg, sizeof(shared.exit.msg), ei->msg);
	shared.exit.exit_code = ei->exit_code;
	/* kind last: user space treats a non-zero kind as "exit info complete" */
	__sync_fetch_and_add(&shared.exit.kind, ei->kind);
}

/*
 * Two struct_ops maps with the same callbacks: user space auto-creates exactly one of them
 * (bpf_map__set_autocreate) -- pyland_partial_ops for --partial (only SCHED_EXT tasks switch).
 */
#define PYLAND_OPS(__name, __flags)						\
SEC(".struct_ops.link")								\
struct sched_ext_ops __name = {							\
	.select_cpu	= (void *)pyland_select_cpu,				\
	.enqueue	= (void *)pyland_enqueue,				\
	.dispatch	= (void *)pyland_dispatch,				\
	.runnable	= (void *)pyland_runnable,				\
	.running	= (void *)pyland_running,				\
	.stopping	= (void *)pyland_stopping,				\
	.tick		= (void *)pyland_tick,					\
	.enable		= (void *)pyland_enable,				\
	.disable	= (void *)pyland_disable,				\
	.init_task	= (void *)pyland_init_task,				\
	.cgroup_init	= (void *)pyland_cgroup_init,				\
	.cgroup_exit	= (void *)pyland_cgroup_exit,				\
	.cgroup_move	= (void *)pyland_cgroup_move,				\
	.cgroup_set_bandwidth = (void *)pyland_cgroup_set_bandwidth,		\
	.init		= (void *)pyland_init,					\
	.exit		= (void *)pyland_exit,					\
	.flags		= SCX_OPS_ENQ_LAST | (__flags),				\
	.timeout_ms	= 5000,							\
	.name		= PYLAND_OPS_NAME,					\
}

PYLAND_OPS(pyland_ops, 0);
PYLAND_OPS(pyland_partial_ops, SCX_OPS_SWITCH_PARTIAL);
