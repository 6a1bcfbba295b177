/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Force-included (clang -include) ahead of pyland.bpf.c to build pyland exactly as `make -C bpf`
 * does, plus one strong kfunc extern whose prototype no kernel has. libbpf then refuses the whole
 * object at load ("extern (func ksym) 'scx_bpf_nr_cpu_ids___pyland_bad': func_proto [...] incompatible
 * with vmlinux [...]") -- the way an older kernel refuses a pyland object built for a newer one. Used by
 * tests/test_doctor_load_vm.py: `scxctl doctor` must predict the failure `scxctl run` then hits.
 * Not a *.bpf.c: the generic rule in this Makefile lacks pyland's flags; the test builds it with
 *   make -C bpf OUT=build/tests/pyland_bad_kfunc CLANG="clang-19 -include $PWD/bpf/tests/pyland_bad_kfunc.h" \
 *        build/tests/pyland_bad_kfunc/pyland.bpf.o
 * Only built-in types here: it is read before vmlinux.h.
 */
#ifndef __PYLAND_BAD_KFUNC_H
#define __PYLAND_BAD_KFUNC_H

/* scx_bpf_nr_cpu_ids() takes no argument in every kernel. The flavour suffix keeps this declaration
 * apart from compat.h's correct one; libbpf strips it when resolving. Not __weak: a weak extern with
 * a wrong prototype would quietly resolve to nothing instead of failing the load. */
extern unsigned int scx_bpf_nr_cpu_ids___pyland_bad(unsigned long long bogus)
	__attribute__((section(".ksyms")));

__attribute__((section("syscall"), used))
int pyland_bad_kfunc(void *ctx)
{
	return scx_bpf_nr_cpu_ids___pyland_bad(1);
}

#endif
