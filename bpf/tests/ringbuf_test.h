/* Layouts shared by ringbuf_test.bpf.c and tests/test_ringbuf.py (mirrored there with struct). */
#ifndef RINGBUF_TEST_H
#define RINGBUF_TEST_H

#include <linux/types.h>

#define RT_MAX_PAYLOAD 1024      /* largest record produce() writes */
#define RT_HDR_BYTES 16          /* struct rt_record before the filler */

/* ctx_in of produce(): write `count` records of `size` bytes (>= 16) into `ring` */
struct rt_produce_args {
	__u32 count;
	__u32 size;
	__u32 discard_every;     /* 0: never; k: discard records whose seq % k == k - 1 */
	__u32 pad;
	__u64 seq_start;
};

/* head of every produced record; filler byte j (after the head) is (seq + j) & 0xff */
struct rt_record {
	__u64 seq;
	__u32 size;
	__u32 magic;
};
#define RT_MAGIC 0x52425431      /* "RBT1" */

/* ctx_in of drain(): drain `uring`, stopping after `max` records (0: no limit) */
struct rt_drain_args {
	__u32 max;
	__u32 pad;
};

/* head of every user-ring record written by the tests; the last 8 bytes hold seq ^ RT_TAIL_XOR */
struct rt_urecord {
	__u64 seq;
	__u64 value;
};
#define RT_TAIL_XOR 0xa5a5a5a5a5a5a5a5ULL

/* the whole .bss of ringbuf_test.bpf.c (one global, so its layout is this struct's) */
struct rt_state {
	/* produce() */
	__u64 produced;      /* records submitted */
	__u64 discarded;     /* records reserved then discarded */
	__u64 full;          /* reservations that failed (ring full) */
	/* drain() */
	__s64 drain_ret;     /* last bpf_user_ringbuf_drain() return value */
	__u64 drained;       /* records seen by the callback, all calls */
	__u64 seq_sum;
	__u64 value_sum;
	__u64 bytes_sum;     /* sum of record sizes as the kernel saw them */
	__u64 last_seq;
	__u64 bad_order;     /* records whose seq != the expected next seq */
	__u64 bad_tail;      /* records whose tail != seq ^ RT_TAIL_XOR */
	__u64 bad_read;      /* records too short or unreadable */
	__u64 expect_seq;    /* next expected seq (the test may set it before a drain) */
	/* filler source: pattern[i] = i & 0xff */
	__u8 pattern[256 + RT_MAX_PAYLOAD];
};

#endif
