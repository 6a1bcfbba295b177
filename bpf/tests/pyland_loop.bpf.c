// SPDX-License-Identifier: GPL-2.0
/*
 * Stand-in for the pyland BPF core on a kernel without sched_ext: the same `queued` and
 * `dispatched` maps, record layouts and shared .bss, driven by BPF_PROG_TEST_RUN. feed() plays
 * ops.enqueue (counts nr_queued BEFORE submitting, like the real core), drain*() play ops.dispatch's
 * bpf_user_ringbuf_drain and check every decision's generation against what feed() sent.
 * Used by tests/test_pyland_loop.py and benchmarks/loop_bench.py.
 */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "../pyland.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);	/* 7281 records of 136 + 8 bytes */
} queued SEC(".maps");

/* steer mode's reports: what tasks did, for observe() */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} reports SEC(".maps");

/* small on purpose: 73 decisions of 48 + 8 bytes, so the tests can fill it */
struct {
	__uint(type, BPF_MAP_TYPE_USER_RINGBUF);
	__uint(max_entries, 4096);
} dispatched SEC(".maps");

/* roomy: a whole 4096-record batch fits, for the throughput benchmark */
struct {
	__uint(type, BPF_MAP_TYPE_USER_RINGBUF);
	__uint(max_entries, 256 * 1024);
} dispatched_big SEC(".maps");

struct pyland_shared shared;	/* the only .bss global: same offsets as in pyland.bpf.o */

/* ctx_in of feed(): pid = pid_base + i, enq_cnt = enq_base + i, for i < count */
struct feed_args {
	__u64 count;	/* 64-bit: the inlined bpf_loop compares the whole register */
	__s32 pid_base;
	__u32 pad;
	__u64 enq_base;
	__u64 vtime;
	__u32 flags;
	__u32 weight;
};

/* what the drains saw, in its own section so `shared` stays alone in .bss */
struct drain_results {
	__s32 pid_base;		/* of the last feed() */
	__u32 pad;
	__u64 enq_base;
	__u64 fed;
	__u64 fed_full;		/* reserve failures in feed() */
	__u64 drained;
	__u64 bad_generation;	/* decision.enq_cnt != the generation fed for that pid */
	__u64 out_of_order;	/* pid != previous pid + 1 */
	__u64 preempt;
	__u64 sum_slice_ns;
	__s32 last_pid;
	__s32 last_cpu;
	__u64 last_deadline;
	__u64 last_vtime;
	__u64 direct_wake;	/* decisions with PYLAND_DECISION_DIRECT_WAKE */
	/* updates (told from decisions by their size, as ops.dispatch does) */
	__u64 updates;
	__s32 upd_pid;		/* of the last update */
	__u32 upd_class;
	__u32 upd_own;
	__u32 upd_flags;
	__u64 upd_slice_ns;
	__s64 upd_lag_ns;
	__u32 upd_weight;
	__s32 upd_cpu;
	__u64 upd_sent_at;
	/* unused: puts the record layouts into this object's BTF for tests/test_pyland_records.py */
	struct pyland_task task_layout;
	struct pyland_decision decision_layout;
	struct pyland_update update_layout;
} results SEC(".data.results") = { .last_pid = -1 };

/* ctx_in of feed_reports(): pid = pid_base + i for i < count */
struct report_args {
	__u64 count;
	__s32 pid_base;
	__u32 nr_wakeups;
	__u64 run_ns;
	__u64 exec_runtime;
	__u32 class_id;
	__u32 weight;
};

static long feed_one(__u64 i, struct feed_args *a)
{
	struct pyland_task *rec;

	rec = bpf_ringbuf_reserve(&queued, sizeof(*rec), 0);
	if (!rec) {
		__sync_fetch_and_add(&results.fed_full, 1);
		return 1;
	}
	rec->pid = a->pid_base + (__s32)i;
	rec->cpu = (__s32)(i & 1);
	rec->nr_cpus_allowed = 2;
	rec->flags = a->flags;
	rec->start_ts = 1000 + i;
	rec->stop_ts = 2000 + i;
	rec->exec_runtime = 100000 + i;
	rec->weight = a->weight;
	rec->placed = (__u32)(i & 1);	/* every other record: placed by BPF already */
	rec->vtime = a->vtime;
	rec->enq_cnt = a->enq_base + i;
	__builtin_memcpy(rec->comm, "pyland-feed\0\0\0\0", PYLAND_COMM_LEN);
	rec->cgroup_id = 7000 + i;
	rec->throttled = (__u64)((i >> 1) & 1);	/* every other pair: held aside for cpu.max */
	rec->run_ns = 300000 + i;
	/* as in pyland.bpf.c: count before publishing */
	__sync_fetch_and_add(&shared.nr_queued, 1);
	bpf_ringbuf_submit(rec, 0);
	results.fed++;
	return 0;
}

SEC("syscall")
int feed(struct feed_args *ctx)
{
	struct feed_args a = *ctx;

	results.pid_base = a.pid_base;
	results.enq_base = a.enq_base;
	return bpf_loop((__u32)a.count, feed_one, &a, 0);
}

static long report_one(__u64 i, struct report_args *a)
{
	struct pyland_task *rec;

	rec = bpf_ringbuf_reserve(&reports, sizeof(*rec), 0);
	if (!rec)
		return 1;
	__builtin_memset(rec, 0, sizeof(*rec));
	rec->pid = a->pid_base + (__s32)i;
	rec->nr_cpus_allowed = 2;
	rec->weight = a->weight;
	rec->placed = 1;
	rec->exec_runtime = a->exec_runtime;
	__builtin_memcpy(rec->comm, "pyland-report\0\0", PYLAND_COMM_LEN);
	rec->run_ns = a->run_ns;
	rec->kind = PYLAND_REC_REPORT;
	rec->nr_wakeups = a->nr_wakeups;
	rec->waker = 1;
	rec->class_id = a->class_id;
	rec->deadline = 12345;
	rec->sleep_ns = 5000000;
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);	/* as pyland.bpf.c: reports never wake the loop */
	return 0;
}

SEC("syscall")
int feed_reports(struct report_args *ctx)
{
	struct report_args a = *ctx;

	return bpf_loop((__u32)a.count, report_one, &a, 0);
}

static long check_update(const struct pyland_update *u)
{
	results.updates++;
	results.upd_pid = u->pid;
	results.upd_class = u->class_id;
	results.upd_own = u->own;
	results.upd_flags = u->params.flags;
	results.upd_slice_ns = u->params.slice_ns;
	results.upd_lag_ns = u->params.lag_ns;
	results.upd_weight = u->params.weight;
	results.upd_cpu = u->params.cpu;
	results.upd_sent_at = u->sent_at;
	return 0;
}

static long check_one(struct bpf_dynptr *dynptr, void *ctx)
{
	const struct pyland_update *u = bpf_dynptr_data(dynptr, 0, sizeof(*u));
	const struct pyland_decision *d;
	__u64 want;

	if (u)
		return check_update(u);
	d = bpf_dynptr_data(dynptr, 0, sizeof(*d));
	if (!d)
		return 1;
	want = results.enq_base + (__u64)(__s64)(d->pid - results.pid_base);
	if (d->enq_cnt != want)
		results.bad_generation++;
	if (results.last_pid >= 0 && d->pid != results.last_pid + 1)
		results.out_of_order++;
	if (d->flags & PYLAND_DECISION_PREEMPT)
		results.preempt++;
	if (d->flags & PYLAND_DECISION_DIRECT_WAKE)
		results.direct_wake++;
	results.sum_slice_ns += d->slice_ns;
	results.last_pid = d->pid;
	results.last_cpu = d->cpu;
	results.last_deadline = d->deadline;
	results.last_vtime = d->vtime;
	results.drained++;
	return 0;
}

SEC("syscall")
int drain(void *ctx)
{
	return bpf_user_ringbuf_drain(&dispatched, check_one, NULL, 0);
}

SEC("syscall")
int drain_big(void *ctx)
{
	return bpf_user_ringbuf_drain(&dispatched_big, check_one, NULL, 0);
}
