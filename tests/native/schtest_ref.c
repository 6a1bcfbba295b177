/*
 * schtest_ref.c - independent reference implementation of two schtest
 * scheduler tests (adaptive_priority and fairness) plus a plain futex
 * ping-pong.
 *
 * This is an independent cross-check of schtest's definitions: it was written
 * from the textual description of the tests only, without looking at the
 * project's own worker, so that the project's benchmark can be compared with
 * a second implementation of the same measurements.
 *
 *   schtest-ref [--sched-ext] adaptive CPU SECONDS
 *   schtest-ref [--sched-ext] fairness SECONDS
 *   schtest-ref [--sched-ext] pingpong CPU ROUNDTRIPS
 *
 * Prints one JSON object on stdout and exits 0; on error prints
 * "schtest-ref: <message>" on stderr and exits 1.  With --sched-ext every
 * workload thread/process switches itself to SCHED_EXT (7) before working.
 *
 * Quantiles are nearest-rank on the sorted samples: rank = ceil(q * n).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SCHED_EXT_POLICY 7
#define MAX_SAMPLES 1000000 /* per semaphore, adaptive mode */
#define MAX_ROUNDTRIPS 50000000L
#define NSEC 1000000000ULL

static int use_sched_ext;
static pid_t *children;
static int nchildren;

/* ---------------------------------------------------------------- helpers */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC + (uint64_t)ts.tv_nsec;
}

static void spin_ns(uint64_t d)
{
	uint64_t t0 = now_ns();
	while (now_ns() - t0 < d)
		;
}

static void sleep_ns(uint64_t d)
{
	struct timespec ts = { (time_t)(d / NSEC), (long)(d % NSEC) };
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

static long futex(_Atomic uint32_t *word, int op, uint32_t val)
{
	return syscall(SYS_futex, (uint32_t *)word, op, val, NULL, NULL, 0);
}

/* Kill and reap every child we forked (parent only). */
static void kill_children(void)
{
	for (int i = 0; i < nchildren; i++)
		if (children[i] > 0)
			kill(children[i], SIGKILL);
	for (int i = 0; i < nchildren; i++)
		if (children[i] > 0)
			waitpid(children[i], NULL, 0);
	nchildren = 0;
}

static void die(const char *fmt, ...)
{
	va_list ap;
	fputs("schtest-ref: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	kill_children();
	exit(1);
}

/* Error channel from workload threads/children to the main process. */
struct errbox {
	_Atomic int state; /* 0 = none, 1 = being written, 2 = set */
	char msg[200];
};

static void report_error(struct errbox *e, const char *fmt, ...)
{
	int expected = 0;
	if (!atomic_compare_exchange_strong(&e->state, &expected, 1))
		return; /* first error wins */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	atomic_store(&e->state, 2);
}

/* Pin the calling thread (cpu >= 0) and switch it to SCHED_EXT if asked. */
static int setup_thread(int cpu, struct errbox *err)
{
	if (cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set)) {
			report_error(err, "sched_setaffinity(CPU %d): %s", cpu, strerror(errno));
			return -1;
		}
	}
	if (use_sched_ext) {
		struct sched_param p = { .sched_priority = 0 };
		if (sched_setscheduler(0, SCHED_EXT_POLICY, &p)) {
			report_error(err, "sched_setscheduler(SCHED_EXT): %s%s", strerror(errno),
				     errno == EINVAL ? " (kernel without sched_ext?)" : "");
			return -1;
		}
	}
	return 0;
}

/* Child-side start: die with the parent, bail out if it is already gone. */
static void child_init(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
}

static void child_park(void)
{
	for (;;)
		pause();
}

static void check_children(void)
{
	for (int i = 0; i < nchildren; i++) {
		if (children[i] > 0 && waitpid(children[i], NULL, WNOHANG) == children[i]) {
			children[i] = 0;
			die("workload process exited unexpectedly");
		}
	}
}

/* Wait until *ctr >= target, watching for errors and dead children. */
static void wait_count(_Atomic uint32_t *ctr, uint32_t target, double timeout_s,
		       struct errbox *err, const char *what)
{
	uint64_t limit = now_ns() + (uint64_t)(timeout_s * 1e9);
	for (;;) {
		if (atomic_load(&err->state) == 2)
			die("%s", err->msg);
		if (atomic_load(ctr) >= target)
			return;
		check_children();
		if (now_ns() > limit)
			die("timed out waiting for %s", what);
		sleep_ns(1000000);
	}
}

static void wait_flag(_Atomic uint32_t *flag)
{
	while (atomic_load(flag) == 0)
		futex(flag, FUTEX_WAIT, 0);
}

static void set_flag(_Atomic uint32_t *flag)
{
	atomic_store(flag, 1);
	futex(flag, FUTEX_WAKE, INT_MAX);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Nearest rank on sorted data: rank = ceil(pct/100 * n), 1-based. */
static uint64_t quantile(const uint64_t *sorted, size_t n, unsigned pct)
{
	size_t rank = (pct * n + 99) / 100;
	return sorted[rank < 1 ? 0 : rank - 1];
}

/* Sorts s in place, prints "name":{...}; returns p90 or -1 if no samples. */
static int64_t print_stats(const char *name, uint64_t *s, size_t n)
{
	printf("\"%s\":{\"count\":%zu", name, n);
	if (n == 0) {
		printf(",\"p50_ns\":null,\"p90_ns\":null,\"p99_ns\":null}");
		return -1;
	}
	qsort(s, n, sizeof(*s), cmp_u64);
	printf(",\"p50_ns\":%llu,\"p90_ns\":%llu,\"p99_ns\":%llu}",
	       (unsigned long long)quantile(s, n, 50), (unsigned long long)quantile(s, n, 90),
	       (unsigned long long)quantile(s, n, 99));
	return (int64_t)quantile(s, n, 90);
}

static pid_t spawn(void (*fn)(void *, int), void *arg, int idx)
{
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		child_init(parent);
		fn(arg, idx);
		_exit(0);
	}
	children[nchildren++] = pid;
	return pid;
}

/* ------------------------------------------------- futex-based semaphore */

struct sem {
	_Atomic uint32_t val;      /* futex word: available count */
	_Atomic uint32_t nwait;    /* threads (about to be) in FUTEX_WAIT */
	_Atomic uint64_t posts;    /* number of posts so far */
	_Atomic uint64_t stamp_seq; /* post that stamp_ns belongs to (0 = none) */
	_Atomic uint64_t stamp_ns; /* CLOCK_MONOTONIC just before FUTEX_WAKE */
	uint64_t last_seq;         /* waiter-private: last post sampled */
};

static void sem_post(struct sem *s)
{
	uint64_t seq = atomic_fetch_add(&s->posts, 1) + 1;
	atomic_fetch_add(&s->val, 1);
	if (atomic_load(&s->nwait) > 0) {
		atomic_store(&s->stamp_seq, 0);
		atomic_store(&s->stamp_ns, now_ns());
		atomic_store(&s->stamp_seq, seq);
		futex(&s->val, FUTEX_WAKE, 1);
	}
}

/* Returns the wake latency (ns) if this call slept and was woken, else -1. */
static int64_t sem_wait(struct sem *s)
{
	int64_t lat = -1;
	for (;;) {
		uint32_t v = atomic_load(&s->val);
		while (v > 0)
			if (atomic_compare_exchange_weak(&s->val, &v, v - 1))
				return lat;
		atomic_fetch_add(&s->nwait, 1);
		long r = futex(&s->val, FUTEX_WAIT, 0);
		uint64_t t = now_ns();
		atomic_fetch_sub(&s->nwait, 1);
		if (r == 0 && lat < 0) {
			uint64_t seq = atomic_load(&s->stamp_seq);
			uint64_t st = atomic_load(&s->stamp_ns);
			if (seq != 0 && seq != s->last_seq && seq == atomic_load(&s->stamp_seq) &&
			    t >= st) {
				s->last_seq = seq;
				lat = (int64_t)(t - st);
			}
		}
	}
}

/* ------------------------------------------------------ adaptive priority */

enum { FAST = 0, SLOW = 1 };

struct adaptive_shm {
	struct errbox err;
	_Atomic uint32_t ready, go, stop, done;
	_Atomic uint64_t deadline_ns;
	int cpu;
	struct sem sem[2], ret[2]; /* controller->worker, worker->controller */
	_Atomic uint64_t nsamples[2];
	uint64_t samples[2][MAX_SAMPLES];
};

struct worker_arg {
	struct adaptive_shm *shm;
	int kind;
};

static void *adaptive_worker(void *p)
{
	struct worker_arg *a = p;
	struct adaptive_shm *shm = a->shm;
	int k = a->kind;

	if (setup_thread(shm->cpu, &shm->err))
		return NULL;
	atomic_fetch_add(&shm->ready, 1);
	for (;;) {
		int64_t lat = sem_wait(&shm->sem[k]);
		if (lat >= 0) {
			uint64_t n = atomic_load(&shm->nsamples[k]);
			if (n < MAX_SAMPLES) {
				shm->samples[k][n] = (uint64_t)lat;
				atomic_store(&shm->nsamples[k], n + 1);
			}
		}
		if (k == SLOW) {
			spin_ns(10000000); /* 10 ms */
		} else {
			spin_ns(100000);  /* 100 us */
			sleep_ns(9900000); /* 9.9 ms */
		}
		sem_post(&shm->ret[k]);
	}
	return NULL;
}

/* Child process: worker thread + controller (this, the main thread). */
static void adaptive_child(void *arg, int kind)
{
	struct adaptive_shm *shm = arg;
	static struct worker_arg wa;
	pthread_t th;

	wa.shm = shm;
	wa.kind = kind;
	if (setup_thread(shm->cpu, &shm->err))
		_exit(1);
	int e = pthread_create(&th, NULL, adaptive_worker, &wa);
	if (e) {
		report_error(&shm->err, "pthread_create: %s", strerror(e));
		_exit(1);
	}
	atomic_fetch_add(&shm->ready, 1);
	wait_flag(&shm->go);
	uint64_t deadline = atomic_load(&shm->deadline_ns);
	while (!atomic_load(&shm->stop) && now_ns() < deadline) {
		sem_post(&shm->sem[kind]);
		sem_wait(&shm->ret[kind]);
	}
	atomic_fetch_add(&shm->done, 1);
	child_park();
}

static void run_adaptive(int cpu, double seconds)
{
	struct adaptive_shm *shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE,
					MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shm == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	shm->cpu = cpu;
	spawn(adaptive_child, shm, FAST);
	spawn(adaptive_child, shm, SLOW);
	wait_count(&shm->ready, 4, 10.0, &shm->err, "workload threads to start");

	uint64_t deadline = now_ns() + (uint64_t)(seconds * 1e9);
	atomic_store(&shm->deadline_ns, deadline);
	set_flag(&shm->go);
	for (uint64_t t; (t = now_ns()) < deadline;) {
		sleep_ns(deadline - t < 50000000 ? deadline - t : 50000000);
		if (atomic_load(&shm->err.state) == 2)
			die("%s", shm->err.msg);
		check_children();
	}
	atomic_store(&shm->stop, 1);
	wait_count(&shm->done, 2, 10.0, &shm->err, "controllers to stop");
	check_children();
	kill_children();

	printf("{\"mode\":\"adaptive\",\"cpu\":%d,\"seconds\":%.15g,", cpu, seconds);
	int64_t pf = print_stats("fast", shm->samples[FAST], atomic_load(&shm->nsamples[FAST]));
	putchar(',');
	int64_t ps = print_stats("slow", shm->samples[SLOW], atomic_load(&shm->nsamples[SLOW]));
	if (pf < 0 || ps <= 0)
		printf(",\"metric\":null}\n");
	else
		printf(",\"metric\":%.9g}\n", (double)pf / (double)ps);
	munmap(shm, sizeof(*shm));
}

/* --------------------------------------------------------------- fairness */

struct fair_shm {
	struct errbox err;
	_Atomic uint32_t ready, go, done;
	_Atomic uint64_t deadline_ns;
	int cpus[CPU_SETSIZE];
	int ncpus;
};

/* idx < ncpus: pinned to cpus[idx]; otherwise unpinned. */
static void fair_child(void *arg, int idx)
{
	struct fair_shm *shm = arg;
	if (setup_thread(idx < shm->ncpus ? shm->cpus[idx] : -1, &shm->err))
		_exit(1);
	atomic_fetch_add(&shm->ready, 1);
	wait_flag(&shm->go);
	uint64_t deadline = atomic_load(&shm->deadline_ns);
	while (now_ns() < deadline)
		;
	atomic_fetch_add(&shm->done, 1);
	child_park();
}

static uint64_t proc_cpu_ticks(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long ut, st;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		die("open %s: %s", path, strerror(errno));
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* comm may contain spaces and parens */
	/* fields 3..13 skipped, 14 = utime, 15 = stime */
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			 &ut, &st) != 2)
		die("cannot parse %s", path);
	return (uint64_t)ut + st;
}

static void run_fairness(double seconds)
{
	struct fair_shm *shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE,
				    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shm == MAP_FAILED)
		die("mmap: %s", strerror(errno));

	/* N = online CPUs, taken as the CPUs in our affinity mask (the two agree
	 * unless a cpuset restricts us; then the mask wins). */
	cpu_set_t mask;
	if (sched_getaffinity(0, sizeof(mask), &mask))
		die("sched_getaffinity: %s", strerror(errno));
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &mask))
			shm->cpus[shm->ncpus++] = c;
	if (shm->ncpus == 0 || online < 1)
		die("no usable CPUs");
	int nproc = 2 * shm->ncpus;

	for (int i = 0; i < nproc; i++)
		spawn(fair_child, shm, i);
	wait_count(&shm->ready, (uint32_t)nproc, 10.0, &shm->err, "workload processes to start");
	atomic_store(&shm->deadline_ns, now_ns() + (uint64_t)(seconds * 1e9));
	set_flag(&shm->go);
	sleep_ns((uint64_t)(seconds * 1e9));
	wait_count(&shm->done, (uint32_t)nproc, 10.0 + seconds, &shm->err,
		   "workload processes to finish");

	uint64_t ticks[2 * CPU_SETSIZE], sum = 0;
	for (int i = 0; i < nproc; i++) /* read before killing */
		sum += ticks[i] = proc_cpu_ticks(children[i]);
	kill_children();

	double hz = (double)sysconf(_SC_CLK_TCK);
	printf("{\"mode\":\"fairness\",\"seconds\":%.15g,\"cpu_time_s\":[", seconds);
	for (int i = 0; i < nproc; i++)
		printf("%s%.9g", i ? "," : "", (double)ticks[i] / hz);
	qsort(ticks, (size_t)nproc, sizeof(ticks[0]), cmp_u64);
	double mean = (double)sum / nproc;
	if (mean > 0)
		printf("],\"metric\":%.9g}\n", (double)quantile(ticks, (size_t)nproc, 10) / mean);
	else
		printf("],\"metric\":null}\n");
	munmap(shm, sizeof(*shm));
}

/* -------------------------------------------------------------- ping-pong */

struct pingpong {
	_Atomic uint32_t turn; /* 0 = ping's turn, 1 = pong's turn */
	_Atomic uint64_t stamp_ns;
	_Atomic uint64_t n;
	_Atomic int failed;
	uint64_t *samples;
	long rounds;
	int cpu;
	pthread_barrier_t bar;
	struct errbox err;
};

static void pp_wait_turn(struct pingpong *pp, uint32_t mine)
{
	for (;;) {
		uint32_t v = atomic_load(&pp->turn);
		if (v == mine)
			return;
		if (futex(&pp->turn, FUTEX_WAIT_PRIVATE, v) == 0) {
			uint64_t t = now_ns();
			uint64_t st = atomic_load(&pp->stamp_ns);
			if (atomic_load(&pp->turn) == mine && t >= st)
				pp->samples[atomic_fetch_add(&pp->n, 1)] = t - st;
		}
	}
}

static void pp_pass(struct pingpong *pp, uint32_t next)
{
	atomic_store(&pp->turn, next);
	atomic_store(&pp->stamp_ns, now_ns());
	futex(&pp->turn, FUTEX_WAKE_PRIVATE, 1);
}

static void *pp_thread(void *p, uint32_t me)
{
	struct pingpong *pp = p;
	if (setup_thread(pp->cpu, &pp->err))
		atomic_store(&pp->failed, 1);
	pthread_barrier_wait(&pp->bar);
	if (atomic_load(&pp->failed))
		return NULL;
	for (long i = 0; i < pp->rounds; i++) {
		if (me == 0) { /* ping */
			pp_pass(pp, 1);
			pp_wait_turn(pp, 0);
		} else { /* pong */
			pp_wait_turn(pp, 1);
			pp_pass(pp, 0);
		}
	}
	return NULL;
}

static void *ping_main(void *p) { return pp_thread(p, 0); }
static void *pong_main(void *p) { return pp_thread(p, 1); }

static void run_pingpong(int cpu, long rounds)
{
	static struct pingpong pp;
	pthread_t a, b;
	pp.cpu = cpu;
	pp.rounds = rounds;
	pp.samples = malloc(sizeof(uint64_t) * 2 * (size_t)rounds);
	if (!pp.samples)
		die("out of memory");
	pthread_barrier_init(&pp.bar, NULL, 2);
	if (pthread_create(&a, NULL, ping_main, &pp) || pthread_create(&b, NULL, pong_main, &pp))
		die("pthread_create failed");
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	if (atomic_load(&pp.failed))
		die("%s", pp.err.msg);
	printf("{\"mode\":\"pingpong\",\"cpu\":%d,\"round_trips\":%ld,", cpu, rounds);
	print_stats("wake", pp.samples, atomic_load(&pp.n));
	printf("}\n");
	free(pp.samples);
}

/* ------------------------------------------------------------------- main */

static const char usage[] = "usage: schtest-ref [--sched-ext] adaptive CPU SECONDS"
			    " | fairness SECONDS | pingpong CPU ROUNDTRIPS";

static int parse_cpu(const char *s)
{
	char *end;
	cpu_set_t mask;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v >= CPU_SETSIZE)
		die("invalid CPU '%s'", s);
	if (sched_getaffinity(0, sizeof(mask), &mask))
		die("sched_getaffinity: %s", strerror(errno));
	if (!CPU_ISSET((int)v, &mask))
		die("CPU %ld is not in this process's affinity mask", v);
	return (int)v;
}

static double parse_seconds(const char *s)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0 && v <= 1e6))
		die("invalid SECONDS '%s' (want a number > 0)", s);
	return v;
}

static long parse_rounds(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v <= 0 || v > MAX_ROUNDTRIPS)
		die("invalid ROUNDTRIPS '%s' (want an integer in 1..%ld)", s, MAX_ROUNDTRIPS);
	return v;
}

int main(int argc, char **argv)
{
	int i = 1;
	if (i < argc && strcmp(argv[i], "--sched-ext") == 0) {
		use_sched_ext = 1;
		i++;
	}
	if (i >= argc)
		die("%s", usage);
	const char *mode = argv[i++];
	int nargs = argc - i;
	char **args = argv + i;

	children = calloc(2 * CPU_SETSIZE, sizeof(*children));
	if (!children)
		die("out of memory");

	if (strcmp(mode, "adaptive") == 0 && nargs == 2)
		run_adaptive(parse_cpu(args[0]), parse_seconds(args[1]));
	else if (strcmp(mode, "fairness") == 0 && nargs == 1)
		run_fairness(parse_seconds(args[0]));
	else if (strcmp(mode, "pingpong") == 0 && nargs == 2)
		run_pingpong(parse_cpu(args[0]), parse_rounds(args[1]));
	else
		die("%s", usage);
	fflush(stdout);
	return 0;
}
