// SPDX-License-Identifier: GPL-2.0
/* A program calling a kfunc that no kernel has, declared strong (not __weak): libbpf refuses the
 * whole object at load ("extern (func ksym) ...: not found in kernel or module BTFs"), as an older
 * kernel refuses an object that needs a kfunc it lacks. Tests that `scxctl doctor`'s trial load
 * reports libbpf's reason; needs no sched_ext. */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

extern int scxctl_test_no_such_kfunc(void) __ksym;

SEC("syscall")
int missing_kfunc(void *ctx)
{
	return scxctl_test_no_such_kfunc();
}
