// SPDX-License-Identifier: GPL-2.0
/* A program the verifier must reject (out-of-bounds map value read): tests that BpfObject.load()
 * raises BpfError carrying the verifier log. */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} small SEC(".maps");

SEC("syscall")
int oob(void *ctx)
{
	__u32 key = 0;
	__u64 *v = bpf_map_lookup_elem(&small, &key);

	if (!v)
		return 0;
	return (int)v[4];   /* value is 8 bytes: offset 32 is out of bounds */
}
