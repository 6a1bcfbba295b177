// SPDX-License-Identifier: GPL-2.0-only
/*
 * wake-load: wake-up loads that count and time their own wake-ups, to check `scxctl trace wakeup`
 * against (benchmarks/trace_load.py runs it). Native, so the load's own clock holds the syscalls
 * and the scheduler's work around its timestamps and nothing else.
 *
 *   wake-load pingpong --name NAME --seconds S [--cgroup DIR]
 *   wake-load wake --name NAME --seconds S [--period-us P] [--cgroup DIR]
 *   wake-load sleep --name NAME --seconds S [--period-us P] [--cgroup DIR]
 *
 * pingpong: two processes named NAME, A pinned to the first CPU of the affinity mask and B to the
 * second, bounce a futex semaphore pair; every FUTEX_WAIT that slept and was woken by a post is a
 * wake-up, timed from just before that post's FUTEX_WAKE to just after the wait returned.
 *
 * wake (the sleep/wake load): one process named NAME, pinned to the first CPU, sleeps on a futex
 * until a waker (named wake-load-waker, pinned to the second CPU) wakes it once every P
 * microseconds (default 1000); every wake-up is timed as pingpong's are, from the waker's
 * timestamp, so how late the waker's own timer fired is not in it. The waker does not wait for
 * answers: a sleeper woken late may find later posts already there, and takes them without
 * sleeping. `voluntary_switches` is the kernel's count of the sleeper's sleeps in that loop, which
 * `wakeups` should equal.
 *
 * sleep: one process named NAME, pinned to the first CPU, 1 ns timer slack, sleeping P
 * microseconds in a loop; every sleep is a wake-up, timed as the oversleep, which holds the timer
 * interrupt's lateness too (no wake-up tracer sees that part: it comes before the wake-up).
 *
 * All three also report the kernel's own account of the same delays, from its scheduler statistics
 * (/proc/thread-self/schedstat, summed over the threads named NAME): `runs`, the times a thread got a
 * CPU after waiting for one, and `run_delay_ns`, the time it waited, woken or preempted alike, which
 * is what `scxctl trace wakeup` measures (its mean is run_delay_ns / runs).
 *
 * `--cgroup DIR` moves the process into that cgroup v2 directory before anything is forked. Prints
 * one JSON object on stdout; an error prints "wake-load: MESSAGE" on stderr and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "die.h"

#define MAX_SAMPLES (4u << 20) /* latencies kept per semaphore (pingpong) or in all (sleep) */
#define NAME_LEN 16            /* the kernel's task name, NUL included */
#define WAKER_NAME "wake-load-waker" /* the sleep/wake load's waker (15 characters) */

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/*
 * Single-producer single-consumer event count whose consumer times its wake-ups.
 *
 * The producer alone advances `seq` (the futex word), the consumer alone advances `taken`.
 * FUTEX_WAIT sleeps only while seq == taken, so a post between the consumer's check and its sleep
 * makes the wait return at once: no wake-up can be lost. A consumer that slept on `taken` was woken
 * by post taken + 1, whose time is in its own stamp: a producer that does not wait for answers (the
 * sleep/wake load's waker) may post again before a late consumer reads it, and one shared stamp
 * would then hold the later post's time.
 */
#define STAMPS 64 /* posts a consumer may fall behind and still time its wake-up */

struct stamp {
	_Atomic uint32_t seq; /* the post `ts` belongs to; 0 while it is being rewritten */
	_Atomic int64_t ts;   /* CLOCK_MONOTONIC ns taken immediately before that post's FUTEX_WAKE */
};

struct sem {
	_Atomic uint32_t seq;         /* posts so far (mod 2^32); producer writes */
	struct stamp stamps[STAMPS];  /* post n's at n % STAMPS; producer writes */
	uint32_t taken;               /* posts consumed so far; consumer only */
	uint64_t woken;               /* wake-ups: waits that slept and were woken by a post */
	uint64_t kept;                /* latencies in `samples`: woken and timed, at most MAX_SAMPLES */
	int64_t *samples;             /* MAX_SAMPLES slots in the shared mapping */
} __attribute__((aligned(64)));

/* The scheduler's statistics of the calling thread: time waited for a CPU, times it got one. */
struct sched_account {
	int64_t run_delay_ns;
	int64_t runs;
};

static struct sched_account sched_account(void)
{
	struct sched_account a = { -1, -1 };
	long long cpu, delay, runs;
	FILE *f = fopen("/proc/thread-self/schedstat", "re");

	if (f && fscanf(f, "%lld %lld %lld", &cpu, &delay, &runs) == 3) {
		a.run_delay_ns = delay;
		a.runs = runs;
	}
	if (f)
		fclose(f);
	return a; /* -1: no CONFIG_SCHED_INFO; reported as null */
}

static struct sched_account sched_since(struct sched_account before)
{
	struct sched_account now = sched_account();

	if (before.runs < 0 || now.runs < 0)
		return (struct sched_account){ -1, -1 };
	return (struct sched_account){ now.run_delay_ns - before.run_delay_ns, now.runs - before.runs };
}

/*
 * The calling thread's voluntary context switches: every time it slept. In the sleep/wake load's
 * loop it sleeps only in FUTEX_WAIT, so this counts its wake-ups independently of the futex code.
 */
static long long voluntary_switches(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru))
		die("getrusage: %s", strerror(errno));
	return ru.ru_nvcsw;
}

static void print_account(struct sched_account a)
{
	if (a.runs < 0)
		printf(", \"runs\": null, \"run_delay_ns\": null");
	else
		printf(", \"runs\": %lld, \"run_delay_ns\": %lld", (long long)a.runs,
		       (long long)a.run_delay_ns);
}

/* What A and B share: one anonymous MAP_SHARED mapping, created before the fork. */
struct shared {
	struct sem ping; /* A -> B */
	struct sem pong; /* B -> A */
	_Atomic int stop;
	int64_t period_ns;              /* the sleep/wake load's waker: its period */
	struct sched_account b_account; /* B's, written before it exits */
	char error[256]; /* B's reason, when it exits 1 */
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *timeout)
{
	/* the shared (not _PRIVATE) operations: waiter and waker live in different processes */
	return syscall(SYS_futex, addr, op, val, timeout, NULL, 0);
}

static void sem_post(struct sem *s)
{
	uint32_t next = atomic_load_explicit(&s->seq, memory_order_relaxed) + 1;
	struct stamp *st = &s->stamps[next % STAMPS];

	atomic_store_explicit(&s->seq, next, memory_order_release);
	/*
	 * A seqlock of one writer (sequentially consistent stores): the slot reads invalid while its
	 * time is rewritten, so a reader that sees the same post before and after read its time.
	 */
	atomic_store(&st->seq, 0);
	atomic_store(&st->ts, now_ns());
	atomic_store(&st->seq, next);
	futex(&s->seq, FUTEX_WAKE, 1, NULL);
}

/* The time of post n, if its slot still holds it (fewer than STAMPS posts came after it). */
static bool stamp_of(struct sem *s, uint32_t n, int64_t *ts)
{
	struct stamp *st = &s->stamps[n % STAMPS];
	uint32_t before = atomic_load(&st->seq);

	*ts = atomic_load(&st->ts);
	return before == n && atomic_load(&st->seq) == n;
}

/*
 * Take one post, sleeping while there is none. A wake-up is counted only when the consumer really
 * slept and was woken (a post that came first has none), and timed from the post that woke it.
 * Returns false only when `timeout` passed with no post.
 */
static bool sem_wait(struct sem *s, const struct timespec *timeout)
{
	uint32_t taken = s->taken;
	bool woken = false;
	int64_t after = 0, posted;

	while (atomic_load_explicit(&s->seq, memory_order_acquire) == taken) {
		long rc = futex(&s->seq, FUTEX_WAIT, taken, timeout);

		after = now_ns();
		woken = rc == 0;
		if (rc < 0 && errno == ETIMEDOUT &&
		    atomic_load_explicit(&s->seq, memory_order_acquire) == taken)
			return false;
	}
	s->taken = taken + 1;
	if (!woken)
		return true;
	s->woken++;
	/* it slept while seq == taken: the first post after that, taken + 1, woke it */
	if (stamp_of(s, taken + 1, &posted) && s->kept < MAX_SAMPLES)
		s->samples[s->kept++] = after - posted;
	return true;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Sorted s, s[min(int(q * len), len - 1)]; "null" when empty. */
static void print_pct(const char *key, const int64_t *sorted, size_t n, double q)
{
	size_t i;

	if (!n) {
		printf("\"%s\": null", key);
		return;
	}
	i = (size_t)(q * (double)n);
	if (i > n - 1)
		i = n - 1;
	printf("\"%s\": %lld", key, (long long)sorted[i]);
}

static void finish_output(void)
{
	if (fflush(stdout) || ferror(stdout))
		die("writing the result: %s", strerror(errno));
}

static void set_name(const char *name)
{
	char comm[NAME_LEN];

	snprintf(comm, sizeof(comm), "%s", name); /* the kernel keeps 15 characters */
	if (prctl(PR_SET_NAME, comm, 0, 0, 0))
		die("prctl(PR_SET_NAME): %s", strerror(errno));
}

/* The first and second CPU of the affinity mask (the first twice when there is one). */
static void mask_cpus(int *first, int *second)
{
	cpu_set_t set;
	int n = 0;

	if (sched_getaffinity(0, sizeof(set), &set))
		die("sched_getaffinity: %s", strerror(errno));
	*first = *second = -1;
	for (int cpu = 0; cpu < CPU_SETSIZE && n < 2; cpu++) {
		if (!CPU_ISSET(cpu, &set))
			continue;
		if (n++ == 0)
			*first = cpu;
		else
			*second = cpu;
	}
	if (*first < 0)
		die("empty CPU affinity mask");
	if (*second < 0)
		*second = *first;
}

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

static void join_cgroup(const char *dir)
{
	char path[4096], pid[32];
	int fd, len;
	ssize_t w;

	if ((size_t)snprintf(path, sizeof(path), "%s/cgroup.procs", dir) >= sizeof(path))
		die("--cgroup: path too long");
	len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		die("%s: %s", path, strerror(errno));
	w = write(fd, pid, (size_t)len);
	if (w != len)
		die("%s: %s", path, w < 0 ? strerror(errno) : "short write");
	if (close(fd))
		die("%s: %s", path, strerror(errno));
}

/* B: answer every ping with a pong until the stop flag comes with a ping. */
static void __attribute__((noreturn)) partner(struct shared *sh, int cpu, pid_t parent)
{
	struct sched_account start;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) || getppid() != parent)
		_exit(1); /* A is gone already (or the request failed): nobody to answer */
	if (pin(cpu)) {
		snprintf(sh->error, sizeof(sh->error), "pinning the partner to CPU %d: %s", cpu,
			 strerror(errno));
		_exit(1);
	}
	start = sched_account();
	for (;;) {
		sem_wait(&sh->ping, NULL);
		if (atomic_load_explicit(&sh->stop, memory_order_acquire))
			break;
		sem_post(&sh->pong);
	}
	sh->b_account = sched_since(start); /* A reads it after waitpid */
	_exit(0);
}

static void partner_died(struct shared *sh, int status)
{
	if (sh->error[0])
		die("%s", sh->error);
	if (WIFSIGNALED(status))
		die("the partner process was killed by signal %d", WTERMSIG(status));
	die("the partner process exited with status %d", WEXITSTATUS(status));
}

/* Take one post of B's (sh->pong), making sure once a second with none that B is still there. */
static void take_from_partner(struct shared *sh, pid_t b)
{
	const struct timespec tick = { .tv_sec = 1 };
	int status;

	while (!sem_wait(&sh->pong, &tick)) {
		if (waitpid(b, &status, WNOHANG) == b)
			partner_died(sh, status);
	}
}

/*
 * The two-process loads' start: the shared block (latency slots for both semaphores included) in
 * MAP_SHARED memory, this process named NAME (the child inherits it) and pinned to the affinity
 * mask's first CPU, `child` forked and pinning itself to the second. Returns the child's pid.
 */
static pid_t start_pair(const char *name, int64_t period_ns,
			void (*child)(struct shared *, int, pid_t), struct shared **shp)
{
	size_t bytes = 2 * (size_t)MAX_SAMPLES * sizeof(int64_t);
	struct shared *sh;
	int64_t *store;
	int cpu_a, cpu_b;
	pid_t b;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	store = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
		     -1, 0);
	if (sh == MAP_FAILED || store == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	sh->ping.samples = store; /* B's latencies */
	sh->pong.samples = store + MAX_SAMPLES;
	sh->period_ns = period_ns;

	mask_cpus(&cpu_a, &cpu_b);
	set_name(name);
	fflush(NULL);
	b = fork();
	if (b < 0)
		die("fork: %s", strerror(errno));
	if (b == 0)
		child(sh, cpu_b, getppid());
	if (pin(cpu_a)) {
		int err = errno;

		kill(b, SIGKILL);
		waitpid(b, NULL, 0);
		die("pinning to CPU %d: %s", cpu_a, strerror(err));
	}
	*shp = sh;
	return b;
}

static int pingpong(const char *name, double seconds)
{
	struct sched_account mine, start;
	struct shared *sh;
	int64_t *all, t0, end, elapsed;
	uint64_t n = 0;
	size_t kept;
	int status;
	pid_t b;

	b = start_pair(name, 0, partner, &sh);

	start = sched_account();
	t0 = now_ns();
	end = t0 + (int64_t)(seconds * 1e9);
	while (now_ns() < end) {
		sem_post(&sh->ping);
		take_from_partner(sh, b);
		n++;
	}
	elapsed = now_ns() - t0;
	atomic_store_explicit(&sh->stop, 1, memory_order_release);
	sem_post(&sh->ping);
	if (waitpid(b, &status, 0) != b)
		die("waitpid: %s", strerror(errno));
	mine = sched_since(start);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		partner_died(sh, status);
	atomic_thread_fence(memory_order_acquire); /* B's counts and samples */

	kept = sh->ping.kept + sh->pong.kept;
	all = malloc((kept ? kept : 1) * sizeof(*all));
	if (!all)
		die("out of memory");
	memcpy(all, sh->ping.samples, sh->ping.kept * sizeof(*all));
	memcpy(all + sh->ping.kept, sh->pong.samples, sh->pong.kept * sizeof(*all));
	qsort(all, kept, sizeof(*all), cmp_i64);

	/* the stop post's wake-up of B is a real wake-up too (counted in ping's) */
	printf("{\"mode\": \"pingpong\", \"wakeups\": %llu, \"round_trips\": %llu, "
	       "\"rate_per_s\": %.1f, ",
	       (unsigned long long)(sh->ping.woken + sh->pong.woken), (unsigned long long)n,
	       elapsed > 0 ? (double)n / ((double)elapsed / 1e9) : 0.0);
	print_pct("p50_ns", all, kept, 0.5);
	printf(", ");
	print_pct("p90_ns", all, kept, 0.9);
	if (mine.runs >= 0 && sh->b_account.runs >= 0) {
		mine.runs += sh->b_account.runs;
		mine.run_delay_ns += sh->b_account.run_delay_ns;
	} else {
		mine.runs = -1;
	}
	print_account(mine);
	printf(", \"samples\": %zu}\n", kept);
	finish_output();
	free(all);
	return 0;
}

/* round(sum / n) as Python's round() does: to the nearest, halves to even. */
static long long round_div(long long sum, long long n)
{
	long long q = sum / n, r = sum % n;

	if (r < 0) { /* floor division */
		q--;
		r += n;
	}
	if (2 * r > n || (2 * r == n && (q & 1)))
		q++;
	return q;
}

/* p50_ns, p90_ns and mean_ns of n sorted latencies that add up to `sum`. */
static void print_latencies(const int64_t *sorted, size_t n, long long sum)
{
	print_pct("p50_ns", sorted, n, 0.5);
	printf(", ");
	print_pct("p90_ns", sorted, n, 0.9);
	if (n)
		printf(", \"mean_ns\": %lld", round_div(sum, (long long)n));
	else
		printf(", \"mean_ns\": null");
}

/* The waker of the sleep/wake load: a post every period (a timed sleep between) until the stop flag. */
static void __attribute__((noreturn)) waker(struct shared *sh, int cpu, pid_t parent)
{
	struct timespec period = { .tv_sec = sh->period_ns / 1000000000LL,
				   .tv_nsec = sh->period_ns % 1000000000LL };

	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) || getppid() != parent)
		_exit(1);
	/* not the sleeper's name: a trace of the sleeper's name counts the sleeper alone */
	if (prctl(PR_SET_NAME, WAKER_NAME, 0, 0, 0) || pin(cpu)) {
		snprintf(sh->error, sizeof(sh->error), "setting up the waker on CPU %d: %s", cpu,
			 strerror(errno));
		_exit(1);
	}
	while (!atomic_load_explicit(&sh->stop, memory_order_acquire)) {
		struct timespec left = period;

		while (clock_nanosleep(CLOCK_MONOTONIC, 0, &left, &left) == EINTR)
			;
		sem_post(&sh->pong); /* stamps its time just before FUTEX_WAKE */
	}
	_exit(0);
}

/*
 * The sleep/wake load: this process (named NAME) sleeps on a futex until the waker, on the second
 * CPU, wakes it once a period. Its latencies run from the waker's timestamp just before FUTEX_WAKE,
 * so the waker's own timer (however late it fires) is not in them, only the wake-up.
 */
static int sleep_wake(const char *name, double seconds, int64_t period_ns)
{
	struct sched_account mine, start;
	struct shared *sh;
	int64_t *store, t0, elapsed, end;
	long long sum = 0, slept;
	int status;
	pid_t b = start_pair(name, period_ns, waker, &sh);

	start = sched_account();
	slept = voluntary_switches();
	t0 = now_ns();
	end = t0 + (int64_t)(seconds * 1e9);
	while (now_ns() < end)
		take_from_partner(sh, b);
	elapsed = now_ns() - t0;
	/* before the wait for the waker, which is not a wake-up timed */
	slept = voluntary_switches() - slept;
	mine = sched_since(start);
	atomic_store_explicit(&sh->stop, 1, memory_order_release);
	if (waitpid(b, &status, 0) != b)
		die("waitpid: %s", strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		partner_died(sh, status);

	store = sh->pong.samples;
	for (size_t i = 0; i < sh->pong.kept; i++)
		sum += store[i];
	qsort(store, sh->pong.kept, sizeof(*store), cmp_i64);
	printf("{\"mode\": \"wake\", \"wakeups\": %llu, \"rate_per_s\": %.1f, ",
	       (unsigned long long)sh->pong.woken,
	       elapsed > 0 ? (double)sh->pong.woken / ((double)elapsed / 1e9) : 0.0);
	print_latencies(store, sh->pong.kept, sum);
	print_account(mine);
	printf(", \"voluntary_switches\": %lld, \"samples\": %zu}\n", slept, (size_t)sh->pong.kept);
	finish_output();
	return 0;
}

static int sleeper(const char *name, double seconds, int64_t period_ns)
{
	struct timespec period = { .tv_sec = period_ns / 1000000000LL,
				   .tv_nsec = period_ns % 1000000000LL };
	int64_t *samples = NULL, end;
	struct sched_account start;
	size_t n = 0, cap = 0;
	uint64_t wakeups = 0;
	long long sum = 0;
	int cpu, unused;

	mask_cpus(&cpu, &unused);
	set_name(name);
	if (pin(cpu))
		die("pinning to CPU %d: %s", cpu, strerror(errno));
	if (prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0))
		die("prctl(PR_SET_TIMERSLACK): %s", strerror(errno));

	start = sched_account();
	end = now_ns() + (int64_t)(seconds * 1e9);
	while (now_ns() < end) {
		struct timespec left = period;
		int64_t t0 = now_ns(), late;
		int rc;

		while ((rc = clock_nanosleep(CLOCK_MONOTONIC, 0, &left, &left)) == EINTR)
			;
		if (rc)
			die("clock_nanosleep: %s", strerror(rc));
		late = now_ns() - t0 - period_ns;
		wakeups++;
		if (n == cap && cap < MAX_SAMPLES) {
			size_t want = cap ? 2 * cap : 4096;
			int64_t *grown;

			if (want > MAX_SAMPLES)
				want = MAX_SAMPLES;
			grown = realloc(samples, want * sizeof(*samples));
			if (!grown)
				die("out of memory");
			samples = grown;
			cap = want;
		}
		if (n < cap) {
			samples[n++] = late;
			sum += late;
		}
	}
	struct sched_account mine = sched_since(start);

	if (n)
		qsort(samples, n, sizeof(*samples), cmp_i64);

	printf("{\"mode\": \"sleep\", \"wakeups\": %llu, \"rate_per_s\": %.1f, ",
	       (unsigned long long)wakeups, (double)wakeups / seconds);
	print_latencies(samples, n, sum);
	print_account(mine);
	printf(", \"samples\": %zu}\n", n);
	finish_output();
	free(samples);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: wake-load pingpong --name NAME --seconds S [--cgroup DIR]\n"
		   "       wake-load wake --name NAME --seconds S [--period-us P] [--cgroup DIR]\n"
		   "       wake-load sleep --name NAME --seconds S [--period-us P] [--cgroup DIR]\n");
}

static double positive(const char *opt, const char *s)
{
	char *e;
	double v;

	errno = 0;
	v = strtod(s, &e);
	if (e == s || *e || errno || !isfinite(v) || v <= 0)
		die("%s: not a positive number: '%s'", opt, s);
	return v;
}

int main(int argc, char **argv)
{
	const char *mode, *name = NULL, *seconds_s = NULL, *period_s = NULL, *cgroup = NULL;
	double seconds, period_us = 1000.0;

	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc < 2)
		die("no mode given (pingpong, wake or sleep); see --help");
	mode = argv[1];
	if (strcmp(mode, "pingpong") && strcmp(mode, "wake") && strcmp(mode, "sleep"))
		die("unknown mode '%s' (pingpong, wake or sleep)", mode);
	for (int i = 2; i < argc; i++) {
		const char *arg = argv[i], *val, *eq = strchr(arg, '=');
		size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
		const char **slot;

		if (len == 6 && !strncmp(arg, "--name", len))
			slot = &name;
		else if (len == 9 && !strncmp(arg, "--seconds", len))
			slot = &seconds_s;
		else if (len == 11 && !strncmp(arg, "--period-us", len) && strcmp(mode, "pingpong"))
			slot = &period_s;
		else if (len == 8 && !strncmp(arg, "--cgroup", len))
			slot = &cgroup;
		else
			die("%s: unknown option '%s'", mode, arg);
		if (eq)
			val = eq + 1;
		else if (i + 1 < argc)
			val = argv[++i];
		else
			die("%.*s needs a value", (int)len, arg);
		*slot = val;
	}
	if (!name)
		die("--name is required");
	if (!seconds_s)
		die("--seconds is required");
	seconds = positive("--seconds", seconds_s);
	if (period_s)
		period_us = positive("--period-us", period_s);
	if (cgroup)
		join_cgroup(cgroup);
	if (!strcmp(mode, "pingpong"))
		return pingpong(name, seconds);
	if (!strcmp(mode, "wake"))
		return sleep_wake(name, seconds, (int64_t)(period_us * 1000));
	return sleeper(name, seconds, (int64_t)(period_us * 1000));
}
