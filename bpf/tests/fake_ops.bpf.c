// SPDX-License-Identifier: GPL-2.0
/* A struct_ops object whose kernel type does not exist in any kernel: libbpf fails to find
 * `struct scxctl_test_missing_ops` in the kernel BTF exactly as it fails to find `struct
 * sched_ext_ops` on a kernel without sched_ext; tests the UNSUPPORTED error mapping. */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

struct scxctl_test_missing_ops {
	int (*init)(void);
	char name[16];
};

SEC("struct_ops/init")
int fake_init(void)
{
	return 0;
}

SEC(".struct_ops.link")
struct scxctl_test_missing_ops fake_ops = {
	.init = (void *)fake_init,
	.name = "fake",
};
