// SPDX-License-Identifier: GPL-2.0-only
/*
 * work-hog: CPU hogs that publish how much work they have done while they run, so that a
 * benchmark can measure the work done in each phase of one long run, with no process start-up
 * inside a phase (under TCG, starting 50 processes takes longer than a 10 s phase).
 *
 *   work-hog run COUNTERS N [CGROUP_PREFIX]
 *   work-hog read COUNTERS N
 *
 * run: creates COUNTERS (N slots of 64 bytes, one cache line per hog), forks N hogs and waits; hog
 * i first moves itself into the cgroup CGROUP_PREFIX<i+1> when given (e.g. /sys/fs/cgroup/bw ->
 * bw1..bwN), then spins on a fixed integer kernel and adds one to its slot after every unit of
 * work. Killing the parent ends every hog. read: prints the sum of the slots and the
 * CLOCK_MONOTONIC time of the read in ns, on one line.
 * Errors print "work-hog: MESSAGE" on stderr and exit 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "die.h"

#define SLOT 64			/* bytes per hog: no two hogs write the same cache line */
#define UNIT (1u << 16)		/* iterations of the kernel per counted unit of work */
#define MAX_HOGS 4096

static _Atomic uint64_t *map_counters(const char *path, long n, int flags)
{
	size_t len = (size_t)n * SLOT;
	int fd = open(path, flags | O_CLOEXEC, 0644);
	void *p;

	if (fd < 0)
		die("cannot open %s: %s", path, strerror(errno));
	if ((flags & O_CREAT) && ftruncate(fd, (off_t)len) < 0)
		die("cannot size %s: %s", path, strerror(errno));
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		die("cannot map %s: %s", path, strerror(errno));
	close(fd);
	return p;
}

static _Atomic uint64_t *slot(_Atomic uint64_t *base, long i)
{
	return (_Atomic uint64_t *)((char *)base + i * SLOT);
}

static void join_cgroup(const char *prefix, long i)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s%ld/cgroup.procs", prefix, i + 1);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	/* "0" moves the writing process itself */
	if (fd < 0 || write(fd, "0", 1) != 1)
		die("cannot join %s: %s", path, strerror(errno));
	close(fd);
}

static void __attribute__((noreturn)) hog(_Atomic uint64_t *counter)
{
	uint64_t x = 88172645463325252ull;

	for (;;) {
		for (unsigned int k = 0; k < UNIT; k++) {	/* xorshift64: no memory traffic */
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		__asm__ volatile("" : : "r"(x));	/* the result is used: the loop stays */
		atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
	}
}

static long parse_n(const char *s)
{
	char *end;
	long n = strtol(s, &end, 10);

	if (*end || n < 1 || n > MAX_HOGS)
		die("N must be 1-%d, got %s", MAX_HOGS, s);
	return n;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "read")) {
		long n = parse_n(argv[3]);
		_Atomic uint64_t *c = map_counters(argv[2], n, O_RDWR);
		struct timespec ts;
		uint64_t sum = 0;

		for (long i = 0; i < n; i++)
			sum += atomic_load_explicit(slot(c, i), memory_order_relaxed);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		printf("%llu %lld\n", (unsigned long long)sum, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
		return 0;
	}
	if (argc >= 4 && !strcmp(argv[1], "run")) {
		long n = parse_n(argv[3]);
		_Atomic uint64_t *c = map_counters(argv[2], n, O_RDWR | O_CREAT | O_TRUNC);
		pid_t parent = getpid();

		for (long i = 0; i < n; i++) {
			pid_t pid = fork();

			if (pid < 0)
				die("fork: %s", strerror(errno));
			if (pid == 0) {
				/* the hogs go with the parent, however it ends; a parent gone already is seen
				 * by getppid() */
				if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
					_exit(1);
				if (argc >= 5)
					join_cgroup(argv[4], i);
				hog(slot(c, i));
			}
		}
		/* a signal that ends the parent ends the hogs (PR_SET_PDEATHSIG) */
		while (wait(NULL) > 0 || errno == EINTR)
			;
		return 0;
	}
	die("usage: work-hog run COUNTERS N [CGROUP_PREFIX] | work-hog read COUNTERS N");
}
