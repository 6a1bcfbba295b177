// SPDX-License-Identifier: GPL-2.0
/* Feeds a RINGBUF and drains a USER_RINGBUF from BPF_PROG_TEST_RUN, so that the Python ring buffer
 * code (scxctl/bpf/ringbuf.py) is tested against real kernel maps without sched_ext.
 * Results land in the single .bss global `st` (struct rt_state, ringbuf_test.h). */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "ringbuf_test.h"

char LICENSE[] SEC("license") = "GPL";

extern __u32 bpf_dynptr_size(const struct bpf_dynptr *p) __ksym;  /* generic kfunc, kernel >= 6.4 */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16384);
} ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_USER_RINGBUF);
	__uint(max_entries, 16384);
} uring SEC(".maps");

struct rt_state st;

struct produce_ctx {
	__u32 size;
	__u32 discard_every;
	__u64 seq_start;
};

static long produce_one(__u64 i, struct produce_ctx *c)
{
	struct bpf_dynptr dp;
	struct rt_record rec;
	__u32 size = c->size, fill;
	__u64 seq = c->seq_start + i;

	if (size < RT_HDR_BYTES || size > RT_MAX_PAYLOAD)
		return 1;
	/* dynptr reservation: the only way to reserve a size chosen at run time (and still discard) */
	if (bpf_ringbuf_reserve_dynptr(&ring, size, 0, &dp)) {
		__sync_fetch_and_add(&st.full, 1);
		bpf_ringbuf_discard_dynptr(&dp, 0);   /* required even when the reservation failed */
		return 0;
	}
	rec.seq = seq;
	rec.size = size;
	rec.magic = RT_MAGIC;
	bpf_dynptr_write(&dp, 0, &rec, sizeof(rec), 0);
	fill = size - RT_HDR_BYTES;
	if (fill > RT_MAX_PAYLOAD - RT_HDR_BYTES)
		fill = 0;
	if (fill)
		bpf_dynptr_write(&dp, RT_HDR_BYTES, &st.pattern[seq & 0xff], fill, 0);
	if (c->discard_every && seq % c->discard_every == c->discard_every - 1) {
		bpf_ringbuf_discard_dynptr(&dp, 0);
		__sync_fetch_and_add(&st.discarded, 1);
	} else {
		bpf_ringbuf_submit_dynptr(&dp, 0);
		__sync_fetch_and_add(&st.produced, 1);
	}
	return 0;
}

SEC("syscall")
int produce(struct rt_produce_args *args)
{
	struct produce_ctx c = {
		.size = args->size,
		.discard_every = args->discard_every,
		.seq_start = args->seq_start,
	};

	for (int i = 0; i < 256 + RT_MAX_PAYLOAD; i++)
		st.pattern[i] = i & 0xff;
	return bpf_loop(args->count, produce_one, &c, 0);
}

struct drain_ctx {
	__u32 max;
	__u32 seen;
};

static long drain_one(struct bpf_dynptr *dp, struct drain_ctx *c)
{
	struct rt_urecord rec;
	__u64 tail;
	__u32 size = bpf_dynptr_size(dp);

	if (size < sizeof(rec) + sizeof(tail) ||
	    bpf_dynptr_read(&rec, sizeof(rec), dp, 0, 0) ||
	    bpf_dynptr_read(&tail, sizeof(tail), dp, size - sizeof(tail), 0)) {
		st.bad_read++;
	} else {
		if (rec.seq != st.expect_seq)
			st.bad_order++;
		if (tail != (rec.seq ^ RT_TAIL_XOR))
			st.bad_tail++;
		st.expect_seq = rec.seq + 1;
		st.last_seq = rec.seq;
		st.seq_sum += rec.seq;
		st.value_sum += rec.value;
	}
	st.bytes_sum += size;
	st.drained++;
	c->seen++;
	return c->max && c->seen >= c->max ? 1 : 0;
}

SEC("syscall")
int drain(struct rt_drain_args *args)
{
	struct drain_ctx c = { .max = args->max };

	st.drain_ret = bpf_user_ringbuf_drain(&uring, drain_one, &c, 0);
	return 0;
}
