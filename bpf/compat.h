/* SPDX-License-Identifier: GPL-2.0 */
/*
 * One pyland object for every kernel with sched_ext from 6.12 through 7.3.
 *
 * vmlinux.h is included with BPF_NO_KFUNC_PROTOTYPES: every sched_ext kfunc pyland calls is declared
 * here, `__ksym __weak`, under a flavoured name. libbpf (>= 1.3) strips the last `___suffix` when it
 * resolves the name against the running kernel's BTF, a missing one resolves to 0, and
 * bpf_ksym_exists() picks the variant at load time (the verifier removes the dead branches).
 * Kernel renames:
 *   6.13  scx_bpf_dispatch[_vtime] -> scx_bpf_dsq_insert[_vtime], scx_bpf_consume -> _dsq_move_to_local
 *   6.14  scx_bpf_now()
 *   6.17  the pre-6.13 names removed
 *   6.19  scx_bpf_dsq_insert___v2 (returns bool), __scx_bpf_dsq_insert_vtime(p, args),
 *         scx_bpf_task_set_slice()
 *   7.1   scx_bpf_dsq_move_to_local___v2(dsq_id, enq_flags)
 *   7.2   implicit `struct bpf_prog_aux *` arguments (see below)
 *   7.3   scx_bpf_cpu_rq() removed: never referenced here.
 * A name the kernel itself spells with `___v2` needs a second suffix (`___v2___pyl`) because libbpf
 * strips only the last one.
 */
#ifndef __PYLAND_COMPAT_H
#define __PYLAND_COMPAT_H

#define PF_KSWAPD	0x00020000	/* not in BTF: #defines do not survive into vmlinux.h */
#define PF_KTHREAD	0x00200000
#define CLOCK_MONOTONIC	1

#ifndef EBUSY
#define EBUSY		16
#endif
#ifndef ENOMEM
#define ENOMEM		12
#endif
#ifndef E2BIG
#define E2BIG		7
#endif
#ifndef EINVAL
#define EINVAL		22
#endif

#define BPF_STRUCT_OPS(name, args...)		SEC("struct_ops/" #name) BPF_PROG(name, ##args)
#define BPF_STRUCT_OPS_SLEEPABLE(name, args...)	SEC("struct_ops.s/" #name) BPF_PROG(name, ##args)

/* kfuncs whose prototype is the same in every kernel since 6.12 */
s32 scx_bpf_task_cpu(const struct task_struct *p) __ksym;
bool scx_bpf_task_running(const struct task_struct *p) __ksym;
u32 scx_bpf_nr_cpu_ids(void) __ksym;
struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
void bpf_task_release(struct task_struct *p) __ksym;
bool bpf_cpumask_test_cpu(u32 cpu, const struct cpumask *cpumask) __ksym;
void bpf_rcu_read_lock(void) __ksym;
void bpf_rcu_read_unlock(void) __ksym;

/*
 * The verifier passes some kfuncs the calling program's `struct bpf_prog_aux *` itself, as a last,
 * implicit argument (7.2: it tells the kfunc which scheduler calls it). Kernels from 7.3 on, and most
 * 7.2 builds, describe such a kfunc in BTF without that argument and add a second `NAME_impl` entry
 * with it; but some 7.2 builds carry, for some of these kfuncs, only the prototype *with* `aux`
 * under the plain name. libbpf refuses an extern whose prototype differs from the kernel's
 * ("func_proto ... incompatible with vmlinux") unless it is weak, in which case it leaves it
 * unresolved. So each of these kfuncs is declared weak as `___pyl`, the way programs call it, and
 * bpf_ksym_exists() tells whether this kernel offers it that way.
 *
 * Where it does not, the verifier cannot call it either: it looks for `NAME_impl` ("cannot find
 * function NAME_impl in BTF"). Each such kfunc has a fallback below (enum pyland_compat in
 * pyland.h), never called where `___pyl` resolved. Without scx_bpf_create_dsq or the DSQ iterator
 * pyland runs on the built-in DSQs only (pyl_custom_dsqs(), see pyland.bpf.c).
 */

/* without it (PYLAND_NO_CUSTOM_DSQS) pyland never calls this: it runs on the built-in DSQs */
s32 scx_bpf_create_dsq___pyl(u64 dsq_id, s32 node) __ksym __weak;

static __always_inline s32 pyl_create_dsq(u64 dsq_id, s32 node)
{
	return scx_bpf_create_dsq___pyl(dsq_id, node);
}

s32 scx_bpf_dsq_nr_queued___pyl(u64 dsq_id) __ksym __weak;

/*
 * Tasks queued in a DSQ; -1 when the kernel cannot count them (PYLAND_NO_NR_QUEUED), like the
 * -ENOENT of a DSQ it does not know: callers read any non-zero value as "someone may wait".
 */
static __always_inline s32 pyl_dsq_nr_queued(u64 dsq_id)
{
	if (bpf_ksym_exists(scx_bpf_dsq_nr_queued___pyl))
		return scx_bpf_dsq_nr_queued___pyl(dsq_id);
	return -1;
}

void scx_bpf_kick_cpu___pyl(s32 cpu, u64 flags) __ksym __weak;

/* false: this kernel cannot kick CPUs (PYLAND_NO_KICK); callers say what replaces the kick */
static __always_inline bool pyl_can_kick(void)
{
	return bpf_ksym_exists(scx_bpf_kick_cpu___pyl);
}

static __always_inline void pyl_kick_cpu(s32 cpu, u64 flags)
{
	if (bpf_ksym_exists(scx_bpf_kick_cpu___pyl))
		scx_bpf_kick_cpu___pyl(cpu, flags);
}

s32 scx_bpf_select_cpu_dfl___pyl(struct task_struct *p, s32 prev_cpu, u64 wake_flags,
				 bool *is_idle) __ksym __weak;
/* without it (PYLAND_NO_SELECT_CPU_DFL) a waking task stays on its previous CPU, never "idle" */
static __always_inline s32 pyl_select_cpu_dfl(struct task_struct *p, s32 prev_cpu, u64 wake_flags,
					      bool *is_idle)
{
	if (bpf_ksym_exists(scx_bpf_select_cpu_dfl___pyl))
		return scx_bpf_select_cpu_dfl___pyl(p, prev_cpu, wake_flags, is_idle);
	*is_idle = false;
	return prev_cpu;
}

bool scx_bpf_test_and_clear_cpu_idle___pyl(s32 cpu) __ksym __weak;

/* claim `cpu` if it is idle; without the kfunc no CPU is ever reported idle */
static __always_inline bool pyl_claim_idle_cpu(s32 cpu)
{
	if (bpf_ksym_exists(scx_bpf_test_and_clear_cpu_idle___pyl))
		return scx_bpf_test_and_clear_cpu_idle___pyl(cpu);
	return false;
}

s32 scx_bpf_pick_idle_cpu___pyl(const struct cpumask *cpus_allowed, u64 flags) __ksym __weak;

/* without it (PYLAND_NO_PICK_IDLE_CPU) no CPU is ever reported idle: -EBUSY, as when none is */
static __always_inline s32 pyl_pick_idle_cpu(const struct cpumask *cpus_allowed, u64 flags)
{
	if (bpf_ksym_exists(scx_bpf_pick_idle_cpu___pyl))
		return scx_bpf_pick_idle_cpu___pyl(cpus_allowed, flags);
	return -EBUSY;
}

u32 scx_bpf_dispatch_nr_slots___pyl(void) __ksym __weak;

/*
 * Is a dispatch-buffer slot left in this ops.dispatch call, after `inserted` inserts? Where the
 * kernel cannot say (PYLAND_NO_DISPATCH_SLOTS) the inserts are counted against the default buffer
 * size, SCX_DSP_DFL_MAX_BATCH (pyland does not set ops.dispatch_max_batch). Only there is the
 * count compared, and the caller keeps it where the verifier does not track its value (a map).
 */
#define PYL_DISPATCH_BATCH	32

static __always_inline bool pyl_dispatch_slot_left(u32 inserted)
{
	if (bpf_ksym_exists(scx_bpf_dispatch_nr_slots___pyl))
		return scx_bpf_dispatch_nr_slots___pyl() > 0;
	return inserted < PYL_DISPATCH_BATCH;
}

void scx_bpf_error_bstr___pyl(char *fmt, unsigned long long *data, u32 data__sz) __ksym __weak;

/*
 * false: this kernel cannot be told of a scheduler error (PYLAND_NO_ERROR_REPORT). scx_bpf_error()
 * then does nothing, and a caller that relied on the ejection falls back instead.
 */
static __always_inline bool pyl_can_report_error(void)
{
	return bpf_ksym_exists(scx_bpf_error_bstr___pyl);
}

static __always_inline void pyl_error_bstr(char *fmt, unsigned long long *data, u32 data__sz)
{
	if (bpf_ksym_exists(scx_bpf_error_bstr___pyl))
		scx_bpf_error_bstr___pyl(fmt, data, data__sz);
}

void scx_bpf_exit_bstr___pyl(s64 exit_code, char *fmt, unsigned long long *data, u32 data__sz) __ksym __weak;

/*
 * Stop the scheduler cleanly (SCX_EXIT_UNREG_BPF with `exit_code`): every task returns to the fair
 * class. False where the kernel cannot be told (its BTF breaks this kfunc like scx_bpf_error_bstr);
 * user space's own watchdog still detaches there.
 */
static __always_inline bool pyl_exit(s64 exit_code, char *fmt, unsigned long long *data, u32 data__sz)
{
	if (!bpf_ksym_exists(scx_bpf_exit_bstr___pyl))
		return false;
	scx_bpf_exit_bstr___pyl(exit_code, fmt, data, data__sz);
	return true;
}

/* insert into a FIFO DSQ */
bool scx_bpf_dsq_insert___v2___pyl(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym __weak;
void scx_bpf_dsq_insert___v1(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym __weak;
void scx_bpf_dispatch___v0(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym __weak;

static __always_inline void pyl_dsq_insert(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags)
{
	if (bpf_ksym_exists(scx_bpf_dsq_insert___v2___pyl))
		scx_bpf_dsq_insert___v2___pyl(p, dsq_id, slice, enq_flags);
	else if (bpf_ksym_exists(scx_bpf_dsq_insert___v1))
		scx_bpf_dsq_insert___v1(p, dsq_id, slice, enq_flags);
	else
		scx_bpf_dispatch___v0(p, dsq_id, slice, enq_flags);
}

/* insert into a vtime-ordered DSQ */
bool __scx_bpf_dsq_insert_vtime___v2(struct task_struct *p,
				     struct scx_bpf_dsq_insert_vtime_args *args) __ksym __weak;
void scx_bpf_dsq_insert_vtime___v1(struct task_struct *p, u64 dsq_id, u64 slice, u64 vtime,
				   u64 enq_flags) __ksym __weak;
void scx_bpf_dispatch_vtime___v0(struct task_struct *p, u64 dsq_id, u64 slice, u64 vtime,
				 u64 enq_flags) __ksym __weak;

static __always_inline void pyl_dsq_insert_vtime(struct task_struct *p, u64 dsq_id, u64 slice, u64 vtime,
						 u64 enq_flags)
{
	if (bpf_ksym_exists(__scx_bpf_dsq_insert_vtime___v2)) {
		/* the args struct only exists in kernels that have this kfunc (CO-RE relocated) */
		struct scx_bpf_dsq_insert_vtime_args args = {
			.dsq_id = dsq_id, .slice = slice, .vtime = vtime, .enq_flags = enq_flags,
		};

		__scx_bpf_dsq_insert_vtime___v2(p, &args);
	} else if (bpf_ksym_exists(scx_bpf_dsq_insert_vtime___v1)) {
		scx_bpf_dsq_insert_vtime___v1(p, dsq_id, slice, vtime, enq_flags);
	} else {
		scx_bpf_dispatch_vtime___v0(p, dsq_id, slice, vtime, enq_flags);
	}
}

/* move the first task of a DSQ to this CPU's local DSQ; true when one moved */
bool scx_bpf_dsq_move_to_local___v2___pyl(u64 dsq_id, u64 enq_flags) __ksym __weak;
bool scx_bpf_dsq_move_to_local___v1(u64 dsq_id) __ksym __weak;
bool scx_bpf_consume___v0(u64 dsq_id) __ksym __weak;

static __always_inline bool pyl_dsq_move_to_local(u64 dsq_id)
{
	if (bpf_ksym_exists(scx_bpf_dsq_move_to_local___v2___pyl))
		return scx_bpf_dsq_move_to_local___v2___pyl(dsq_id, 0);
	if (bpf_ksym_exists(scx_bpf_dsq_move_to_local___v1))
		return scx_bpf_dsq_move_to_local___v1(dsq_id);
	return scx_bpf_consume___v0(dsq_id);
}

/* iterate a DSQ and move a task found there (6.12: the dispatch_from_dsq names) */
int bpf_iter_scx_dsq_new___pyl(struct bpf_iter_scx_dsq *it, u64 dsq_id, u64 flags) __ksym __weak;
struct task_struct *bpf_iter_scx_dsq_next(struct bpf_iter_scx_dsq *it) __ksym __weak;
void bpf_iter_scx_dsq_destroy(struct bpf_iter_scx_dsq *it) __ksym __weak;

/*
 * Is this CPU in a hard interrupt, or serving a soft one? From the preempt count, as in_hardirq()
 * and in_serving_softirq() read it: x86 keeps it in the per-CPU `__preempt_count` (6.16 on; older
 * kernels keep it in pcpu_hot, not read here: there this says no, and nothing that asks it changes).
 * 7.3 moved the hard-interrupt count up a byte, above a new count of nested interrupt disables,
 * and made the variable an unsigned long whose low half (little-endian: its first) holds the
 * counts. The per-CPU `local_interrupt_disable_state` came with that layout and tells it apart.
 * Softirq's bit 8 alone means serving one; the bits above it count bottom halves disabled.
 */
extern const int __preempt_count __ksym __weak;
extern const unsigned long local_interrupt_disable_state __ksym __weak;

#define PYL_SOFTIRQ_OFFSET	0x00000100U
#define PYL_HARDIRQ_MASK	0x000f0000U	/* up to 7.2 */
#define PYL_HARDIRQ_MASK_7_3	0x0f000000U	/* 7.3: above HARDIRQ_DISABLE_MASK, 0x00ff0000 */

static __always_inline bool pyl_in_interrupt(void)
{
	u32 count;

	if (!bpf_ksym_exists(&__preempt_count))
		return false;
	count = *(const u32 *)bpf_this_cpu_ptr(&__preempt_count);
	if (bpf_ksym_exists(&local_interrupt_disable_state))
		return count & (PYL_HARDIRQ_MASK_7_3 | PYL_SOFTIRQ_OFFSET);
	return count & (PYL_HARDIRQ_MASK | PYL_SOFTIRQ_OFFSET);
}

/* the facilities above that this kernel cannot give (enum pyland_compat) */
static __always_inline bool pyl_cgroup_bw(void);

static __always_inline u64 pyl_compat_missing(void)
{
	u64 missing = 0;

	if (!bpf_ksym_exists(scx_bpf_select_cpu_dfl___pyl))
		missing |= PYLAND_NO_SELECT_CPU_DFL;
	if (!bpf_ksym_exists(scx_bpf_pick_idle_cpu___pyl))
		missing |= PYLAND_NO_PICK_IDLE_CPU;
	if (!bpf_ksym_exists(scx_bpf_dispatch_nr_slots___pyl))
		missing |= PYLAND_NO_DISPATCH_SLOTS;
	if (!bpf_ksym_exists(scx_bpf_create_dsq___pyl))
		missing |= PYLAND_NO_CUSTOM_DSQS;
	if (!bpf_ksym_exists(scx_bpf_kick_cpu___pyl))
		missing |= PYLAND_NO_KICK;
	if (!bpf_ksym_exists(bpf_iter_scx_dsq_new___pyl))
		missing |= PYLAND_NO_DSQ_ITER;
	if (!bpf_ksym_exists(scx_bpf_error_bstr___pyl))
		missing |= PYLAND_NO_ERROR_REPORT;
	if (!bpf_ksym_exists(scx_bpf_dsq_nr_queued___pyl))
		missing |= PYLAND_NO_NR_QUEUED;
	if (!pyl_cgroup_bw())
		missing |= PYLAND_NO_CGROUP_BW;
	return missing;
}

/*
 * pyland's own DSQs need both scx_bpf_create_dsq and the DSQ iterator: they are ordered by the
 * policy's deadlines, and without the iterator nothing could rescue a task those deadlines keep
 * passing (rescue_starved() in pyland.bpf.c). Without either, pyland uses the FIFO built-in DSQs.
 */
static __always_inline bool pyl_custom_dsqs(void)
{
	return bpf_ksym_exists(scx_bpf_create_dsq___pyl) && bpf_ksym_exists(bpf_iter_scx_dsq_new___pyl);
}

/*
 * Start walking a DSQ. The verifier insists that every iterator started is destroyed, whatever
 * _new returned (a failed start leaves an empty iterator), so callers always pair this with
 * bpf_iter_scx_dsq_destroy(); bpf_for_each() cannot be used, it calls the plain _new by name.
 */
static __always_inline void pyl_iter_dsq_new(struct bpf_iter_scx_dsq *it, u64 dsq_id, u64 flags)
{
	bpf_iter_scx_dsq_new___pyl(it, dsq_id, flags);	/* only reached where pyl_custom_dsqs() */
}
bool scx_bpf_dsq_move___v1(struct bpf_iter_scx_dsq *it__iter, struct task_struct *p, u64 dsq_id,
			   u64 enq_flags) __ksym __weak;
bool scx_bpf_dispatch_from_dsq___v0(struct bpf_iter_scx_dsq *it__iter, struct task_struct *p, u64 dsq_id,
				    u64 enq_flags) __ksym __weak;

static __always_inline bool pyl_dsq_move(struct bpf_iter_scx_dsq *it, struct task_struct *p, u64 dsq_id,
					 u64 enq_flags)
{
	if (bpf_ksym_exists(scx_bpf_dsq_move___v1))
		return scx_bpf_dsq_move___v1(it, p, dsq_id, enq_flags);
	return scx_bpf_dispatch_from_dsq___v0(it, p, dsq_id, enq_flags);
}

/*
 * Moving a task between DSQs with a new ordering key (6.12: the *_from_dsq names). pyland moves
 * only from ops.dispatch, which every version allows.
 */
void scx_bpf_dsq_move_set_vtime___v1(struct bpf_iter_scx_dsq *it__iter, u64 vtime) __ksym __weak;
void scx_bpf_dispatch_from_dsq_set_vtime___v0(struct bpf_iter_scx_dsq *it__iter, u64 vtime) __ksym __weak;
bool scx_bpf_dsq_move_vtime___v1(struct bpf_iter_scx_dsq *it__iter, struct task_struct *p, u64 dsq_id,
				 u64 enq_flags) __ksym __weak;
bool scx_bpf_dispatch_vtime_from_dsq___v0(struct bpf_iter_scx_dsq *it__iter, struct task_struct *p,
					  u64 dsq_id, u64 enq_flags) __ksym __weak;

static __always_inline bool pyl_can_move_vtime(void)
{
	return (bpf_ksym_exists(scx_bpf_dsq_move_set_vtime___v1) && bpf_ksym_exists(scx_bpf_dsq_move_vtime___v1)) ||
	       (bpf_ksym_exists(scx_bpf_dispatch_from_dsq_set_vtime___v0) &&
		bpf_ksym_exists(scx_bpf_dispatch_vtime_from_dsq___v0));
}

static __always_inline bool pyl_dsq_move_vtime(struct bpf_iter_scx_dsq *it, struct task_struct *p, u64 dsq_id,
					       u64 vtime)
{
	if (bpf_ksym_exists(scx_bpf_dsq_move_vtime___v1)) {
		scx_bpf_dsq_move_set_vtime___v1(it, vtime);
		return scx_bpf_dsq_move_vtime___v1(it, p, dsq_id, 0);
	}
	scx_bpf_dispatch_from_dsq_set_vtime___v0(it, vtime);
	return scx_bpf_dispatch_vtime_from_dsq___v0(it, p, dsq_id, 0);
}

/*
 * cpu.max enforcement (cgroup_bw.h) needs the bandwidth hooks (6.17: ops.cgroup_set_bandwidth and
 * the bw_* fields of ops.cgroup_init's arguments), the ancestors of a cgroup, pyland's own DSQs
 * and moves between them. Older kernels keep a cgroup's cpu.max for the fair class only.
 */
struct cgroup *bpf_cgroup_ancestor___pyl(struct cgroup *cgrp, int level) __ksym __weak;
struct cgroup *bpf_cgroup_from_id___pyl(u64 cgid) __ksym __weak;
void bpf_cgroup_release___pyl(struct cgroup *cgrp) __ksym __weak;

static __always_inline bool pyl_cgroup_bw(void)
{
	struct scx_cgroup_init_args *args = NULL;

	return bpf_core_field_exists(args->bw_quota_us) && bpf_ksym_exists(bpf_cgroup_ancestor___pyl) &&
	       bpf_ksym_exists(bpf_cgroup_from_id___pyl) && bpf_ksym_exists(bpf_cgroup_release___pyl) &&
	       pyl_custom_dsqs() && pyl_can_move_vtime();
}

/* clock shared with the scheduler core (rq clock); plain monotonic time before 6.14 */
u64 scx_bpf_now___v1(void) __ksym __weak;

static __always_inline u64 pyl_now(void)
{
	return bpf_ksym_exists(scx_bpf_now___v1) ? scx_bpf_now___v1() : bpf_ktime_get_ns();
}

/*
 * Time from `then` to `now`, 0 when `then` is later. A stamp written on another CPU can be ahead of
 * this CPU's clock (scx_bpf_now() is each runqueue's cached clock), and a plain unsigned difference
 * would read as ages: a task queued a moment ago as starved, a loop stamped just now as stalled.
 */
static __always_inline u64 pyl_elapsed(u64 now, u64 then)
{
	return (s64)(now - then) > 0 ? now - then : 0;
}

/* 7.0 warns on direct writes to p->scx.slice; the kfunc exists from 6.19 */
bool scx_bpf_task_set_slice___v1(struct task_struct *p, u64 slice) __ksym __weak;

static __always_inline void pyl_set_slice(struct task_struct *p, u64 slice)
{
	if (bpf_ksym_exists(scx_bpf_task_set_slice___v1))
		scx_bpf_task_set_slice___v1(p, slice);
	else
		p->scx.slice = slice;
}

/* scx_bpf_error(): formats like bpf_printk and makes the kernel eject the scheduler (ERROR_BPF) */
#define scx_bpf_error(fmt, args...)						\
({										\
	static char ___fmt[] = fmt;						\
	unsigned long long ___param[___bpf_narg(args)];				\
										\
	_Pragma("GCC diagnostic push")						\
	_Pragma("GCC diagnostic ignored \"-Wint-conversion\"")			\
	___bpf_fill(___param, args);						\
	_Pragma("GCC diagnostic pop")						\
										\
	pyl_error_bstr(___fmt, ___param, sizeof(___param));			\
})

#endif /* __PYLAND_COMPAT_H */
