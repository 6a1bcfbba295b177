// SPDX-License-Identifier: GPL-2.0
/* Global data round trip for tests/test_libbpf.py: .rodata set before load is seen by the program,
 * the program's .bss/.data writes are seen through the live mapping after load. */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

const volatile __u64 factor = 1;    /* .rodata, set by the test before load */
struct {
	__u64 calls;
	__u64 last_product;
} out;                              /* .bss: one global, so the test knows its layout */
__u64 bias = 7;                     /* .data */

struct args {
	__u64 x;
};

SEC("syscall")
int mul(struct args *a)
{
	out.calls++;
	out.last_product = a->x * factor + bias;
	return (int)(out.last_product & 0x7fffffff);
}
