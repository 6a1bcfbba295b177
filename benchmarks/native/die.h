/* SPDX-License-Identifier: GPL-2.0-only */
/* The native benchmark programs' one way to fail: "PROGRAM: MESSAGE" on stderr, exit status 1. */
#ifndef SCXCTL_BENCH_DIE_H
#define SCXCTL_BENCH_DIE_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* the binary's own name (build/wake-load -> "wake-load"), set by glibc from argv[0] */
	fprintf(stderr, "%s: %s\n", program_invocation_short_name, msg);
	exit(1);
}

#endif
