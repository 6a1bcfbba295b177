// SPDX-License-Identifier: GPL-2.0-only
/*
 * scxctl-bench-worker: the timed half of `scxctl bench`, schtest's workload roles in native code.
 *
 * An interpreter between a futex wake-up and its timestamp adds its own microseconds to every sample
 * and its own CPU time to every task the scheduler sees, so the roles whose timing is the result run
 * here. Python (scxctl/bench/worker.py) starts one worker per test, and keeps the convergence, the
 * statistics, the scheduler's lifecycle and the report.
 *
 *   scxctl-bench-worker [--sched-ext] adaptive CPU     schtest's adaptive_priority on one CPU
 *   scxctl-bench-worker [--sched-ext] fairness CPUS    one spinner pinned per CPU + as many unpinned
 *   scxctl-bench-worker [--sched-ext] floor CPU        uncontended ping-pong: the harness's floor
 *   scxctl-bench-worker --check                        prints "ok" (doctor: does it run here?)
 *
 * Protocol (lines): the worker prints "ready ROLE=PID ..." once every role is pinned and waiting,
 * then for each "round N" read on stdin runs one round and prints, for each sampled semaphore,
 * "sem NAME SEEN V1 V2 ..." (wake latencies in ns, at most RESERVOIR) and finally "done". EOF on
 * stdin ends the worker. A failure prints "error KIND MESSAGE" (KIND: usage, perm, sys) and exits
 * 2 (usage) or 1.
 *
 * The driver (this process) stays unpinned and in its own scheduling class, as schtest's harness;
 * every role process is pinned and, with --sched-ext, switched to SCHED_EXT before it starts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
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

#define SCHED_EXT 7
#define RESERVOIR 1024 /* samples kept per semaphore, as schtest's Semaphore<_, 1024> */
#define MAX_ROLES 1024
#define NAME_LEN 16 /* the kernel's task name, NUL included */

#define SLOW_SPIN_NS 10000000LL
#define FAST_SPIN_NS 100000LL
#define FAST_SLEEP_NS (10000000LL - FAST_SPIN_NS)

/*
 * Single-producer single-consumer semaphore whose consumer samples wake latencies.
 *
 * It is an event count: the producer alone advances `seq` (the futex word), the consumer alone
 * advances `taken`. FUTEX_WAIT sleeps only while seq == taken, so a post between the consumer's
 * check and its sleep makes the wait return at once: no wake-up can be lost.
 */
struct sem {
	_Atomic uint32_t seq;      /* posts so far (mod 2^32); producer writes */
	_Atomic uint32_t wake_seq; /* the post `wake_ts` belongs to; published after wake_ts */
	_Atomic int64_t wake_ts;   /* CLOCK_MONOTONIC ns taken immediately before FUTEX_WAKE */
	int futex_flags;           /* FUTEX_PRIVATE_FLAG when both ends are threads of one process */
	char _pad0[44];            /* the consumer's fields below on their own cache line */
	uint32_t taken;            /* posts consumed so far; consumer only */
	uint64_t seen;             /* wake-ups sampled this round; consumer writes, driver resets */
	uint64_t rng;              /* reservoir sampling's generator state; consumer only */
	int64_t samples[RESERVOIR];
} __attribute__((aligned(64)));

/* schtest's start/ready handshake: the driver hands a role process `iters` for one round. */
struct control {
	struct sem start; /* driver -> role */
	struct sem ready; /* role -> driver */
	_Atomic uint64_t iters;
};

struct role {
	char label[32];      /* the role as the ready line and errors name it */
	char name[NAME_LEN]; /* its task name: scxbench-LABEL, cut to the kernel's 15 characters */
	pid_t pid;
	int cpu; /* pinned CPU, -1 when it may run on every test CPU */
	struct control ctl;
};

/* Everything the processes share: one anonymous MAP_SHARED mapping, created before any fork. */
struct arena {
	_Atomic int failed;  /* a role could not set itself up: `error` says why */
	char error_kind[8];
	char error[256];
	int nr_roles;
	struct role roles[MAX_ROLES];
	struct sem sems[4];  /* the test's sampled and returned semaphores */
};

static struct arena *A;
static bool use_sched_ext;
static cpu_set_t test_cpus;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long futex(struct sem *s, int op, uint32_t val, const struct timespec *timeout)
{
	return syscall(SYS_futex, &s->seq, op | s->futex_flags, val, timeout, NULL, 0);
}

static void sem_post(struct sem *s)
{
	uint32_t next = atomic_load_explicit(&s->seq, memory_order_relaxed) + 1;

	atomic_store_explicit(&s->seq, next, memory_order_release);
	atomic_store_explicit(&s->wake_ts, now_ns(), memory_order_relaxed);
	/* release: a consumer that reads wake_seq == next reads this post's wake_ts */
	atomic_store_explicit(&s->wake_seq, next, memory_order_release);
	futex(s, FUTEX_WAKE, 1, NULL);
}

static uint64_t next_random(uint64_t *state)
{
	/* xorshift64*: reservoir sampling needs uniform indices, not cryptographic ones */
	uint64_t x = *state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Vitter's algorithm R: every wake-up of the round has the same chance to be kept. */
static void sem_record(struct sem *s, int64_t latency_ns)
{
	uint64_t n = s->seen;

	if (n < RESERVOIR) {
		s->samples[n] = latency_ns;
	} else {
		uint64_t j = next_random(&s->rng) % (n + 1);

		if (j < RESERVOIR)
			s->samples[j] = latency_ns;
	}
	s->seen = n + 1;
}

/*
 * Take one post, sleeping while there is none. A latency is sampled only when the consumer really
 * slept and was woken: when the post came first there is no wake-up to time (schtest's rule).
 * Returns false only when `timeout` passed with no post.
 */
static bool sem_wait(struct sem *s, bool sample, const struct timespec *timeout)
{
	uint32_t taken = s->taken;
	bool woken = false;
	int64_t after = 0;

	while (atomic_load_explicit(&s->seq, memory_order_acquire) == taken) {
		long rc = futex(s, FUTEX_WAIT, taken, timeout);

		after = now_ns();
		woken = rc == 0;
		if (rc < 0 && errno == ETIMEDOUT &&
		    atomic_load_explicit(&s->seq, memory_order_acquire) == taken)
			return false;
	}
	s->taken = taken + 1;
	/* wake_seq == taken + 1: this post's timestamp, not a later post's (none can come before
	 * the consumer answers) nor an earlier one's (a wake-up that raced with the store) */
	if (sample && woken &&
	    atomic_load_explicit(&s->wake_seq, memory_order_acquire) == taken + 1)
		sem_record(s, after - atomic_load_explicit(&s->wake_ts, memory_order_relaxed));
	return true;
}

static void spin_for_ns(int64_t ns)
{
	int64_t end = now_ns() + ns;

	while (now_ns() < end)
		;
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL };

	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

/* Role side of the handshake: report the previous round done, wait for the next one. */
static uint64_t get_iters(struct control *ctl)
{
	sem_post(&ctl->ready);
	sem_wait(&ctl->start, false, NULL);
	return atomic_load_explicit(&ctl->iters, memory_order_relaxed);
}

static void name_task(const char *name)
{
	prctl(PR_SET_NAME, name, 0, 0, 0);
}

static void fail(const char *kind, const char *fmt, ...)
{
	va_list ap;

	printf("error %s ", kind);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(strcmp(kind, "usage") == 0 ? 2 : 1);
}

/* In a role process: record why it cannot run and exit; the driver reports it. */
static void role_fail(const char *kind, const char *fmt, ...)
{
	va_list ap;

	strncpy(A->error_kind, kind, sizeof(A->error_kind) - 1);
	va_start(ap, fmt);
	vsnprintf(A->error, sizeof(A->error), fmt, ap);
	va_end(ap);
	atomic_store(&A->failed, 1);
	_exit(1);
}

static const char *errno_kind(int err)
{
	return err == EPERM || err == EACCES ? "perm" : "sys";
}

/* Pin the calling process and switch it to SCHED_EXT; its threads inherit both. */
static void set_up_role(struct role *r)
{
	cpu_set_t set;
	struct sched_param param = { .sched_priority = 0 };

	if (r->cpu >= 0) {
		CPU_ZERO(&set);
		CPU_SET(r->cpu, &set);
	} else {
		set = test_cpus;
	}
	if (sched_setaffinity(0, sizeof(set), &set))
		role_fail(errno == EINVAL ? "usage" : errno_kind(errno),
			  "cannot pin the %s process to CPU %d: %s", r->label, r->cpu, strerror(errno));
	if (use_sched_ext && sched_setscheduler(0, SCHED_EXT, &param))
		role_fail(errno_kind(errno), "cannot set SCHED_EXT on the %s process: %s",
			  r->label, strerror(errno));
}

typedef void (*role_fn)(struct role *r, void *arg);

/*
 * Fork a role process. It dies with the driver (PR_SET_PDEATHSIG), and checks that the driver was
 * not already gone before the death signal was armed.
 */
static struct role *spawn(const char *name, int cpu, role_fn fn, void *arg)
{
	struct role *r;
	pid_t driver = getpid();
	pid_t pid;

	if (A->nr_roles == MAX_ROLES)
		fail("usage", "too many workload processes (at most %d)", MAX_ROLES);
	r = &A->roles[A->nr_roles++];
	snprintf(r->label, sizeof(r->label), "%s", name);
	snprintf(r->name, NAME_LEN, "scxbench-%s", name);
	r->cpu = cpu;
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		fail("sys", "fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		if (getppid() != driver)
			_exit(1);
		set_up_role(r);
		name_task(r->name); /* named once pinned: a named role is a fully set-up one */
		fn(r, arg);
		_exit(0);
	}
	r->pid = pid;
	return r;
}

/* ---- adaptive_priority: two processes, each a controller thread and a worker thread ---- */

struct pair {
	struct sem *sem; /* controller -> worker: sampled */
	struct sem *ret; /* worker -> controller */
	bool fast;
	char worker_name[NAME_LEN];
};

static void *pair_worker(void *arg)
{
	struct pair *p = arg;

	for (;;) {
		sem_wait(p->sem, true, NULL);
		if (p->fast) {
			spin_for_ns(FAST_SPIN_NS);
			sleep_ns(FAST_SLEEP_NS);
		} else {
			spin_for_ns(SLOW_SPIN_NS);
		}
		sem_post(p->ret);
	}
	return NULL;
}

/* The process's main thread is the controller: `iters` round trips of post(sem), wait(ret). */
static void pair_process(struct role *r, void *arg)
{
	struct pair *p = arg;
	pthread_t worker;
	int err = pthread_create(&worker, NULL, pair_worker, p);

	if (err)
		role_fail("sys", "cannot start the %s thread: %s", p->worker_name + 9, strerror(err));
	/* named here, before this role reports ready: a name the thread set itself could come later */
	pthread_setname_np(worker, p->worker_name);
	for (;;) {
		uint64_t n = get_iters(&r->ctl);

		for (uint64_t i = 0; i < n; i++) {
			sem_post(p->sem);
			sem_wait(p->ret, false, NULL);
		}
	}
}

/* ---- fairness: single-threaded spinners, each round `iters` ms of wall-clock time ---- */

static void spinner_process(struct role *r, void *arg)
{
	(void)arg;
	for (;;)
		spin_for_ns((int64_t)get_iters(&r->ctl) * 1000000LL);
}

/* ---- the floor: ping and pong threads of one process, nothing else on the CPU ---- */

static void *floor_pong(void *arg)
{
	struct sem *s = arg; /* s[0] ping, s[1] pong */

	for (;;) {
		sem_wait(&s[0], true, NULL);
		sem_post(&s[1]);
	}
	return NULL;
}

static void floor_process(struct role *r, void *arg)
{
	struct sem *s = arg;
	pthread_t pong;
	int err = pthread_create(&pong, NULL, floor_pong, s);

	if (err)
		role_fail("sys", "cannot start the pong thread: %s", strerror(err));
	pthread_setname_np(pong, "scxbench-pong"); /* before ready, as in pair_process */
	for (;;) {
		uint64_t n = get_iters(&r->ctl);

		for (uint64_t i = 0; i < n; i++) {
			sem_post(&s[0]);
			sem_wait(&s[1], true, NULL);
		}
	}
}

/* ---- the driver ---- */

static void kill_roles(void)
{
	for (int i = 0; i < A->nr_roles; i++)
		if (A->roles[i].pid > 0)
			kill(A->roles[i].pid, SIGKILL);
	for (int i = 0; i < A->nr_roles; i++)
		if (A->roles[i].pid > 0)
			waitpid(A->roles[i].pid, NULL, 0);
}

/* A role process that exited ends the worker with its reason. */
static void check_roles(void)
{
	for (int i = 0; i < A->nr_roles; i++) {
		struct role *r = &A->roles[i];
		int status;

		if (r->pid <= 0 || waitpid(r->pid, &status, WNOHANG) != r->pid)
			continue;
		r->pid = 0;
		kill_roles();
		if (atomic_load(&A->failed))
			fail(A->error_kind, "%s", A->error);
		if (WIFSIGNALED(status))
			fail("sys", "workload process %s was killed by signal %d", r->label, WTERMSIG(status));
		fail("sys", "workload process %s exited with status %d", r->label, WEXITSTATUS(status));
	}
}

/* Take each role's ready post, noticing a role that died instead of waiting for it forever. */
static void wait_ready(void)
{
	const struct timespec tick = { .tv_nsec = 100000000 };

	for (int i = 0; i < A->nr_roles; i++)
		while (!sem_wait(&A->roles[i].ctl.ready, false, &tick))
			check_roles();
}

static void print_sem(const char *name, struct sem *s)
{
	uint64_t kept = s->seen < RESERVOIR ? s->seen : RESERVOIR;

	printf("sem %s %llu", name, (unsigned long long)s->seen);
	for (uint64_t i = 0; i < kept; i++)
		printf(" %lld", (long long)s->samples[i]);
	printf("\n");
	s->seen = 0; /* the consumer is blocked until the next round's start post orders this */
}

/*
 * The sampled semaphores connect threads of one role process, so they use the private futex
 * operations (hashed by address, no shared-mapping lookup): the cheapest wake-up there is, which
 * keeps the harness's own cost in each sample at its floor. The start/ready handshakes cross
 * processes and stay shared.
 */
static void init_sampled_sem(struct sem *s, uint64_t seed)
{
	s->futex_flags = FUTEX_PRIVATE_FLAG;
	s->rng = seed | 1;
}

static void serve(const char *const names[], struct sem *sampled[], int nr_sampled)
{
	char line[128];
	int i;

	wait_ready();
	printf("ready");
	for (i = 0; i < A->nr_roles; i++)
		printf(" %s=%d", A->roles[i].label, A->roles[i].pid);
	printf("\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		unsigned long long iters;

		if (sscanf(line, "round %llu", &iters) != 1 || iters == 0) {
			line[strcspn(line, "\n")] = '\0';
			kill_roles();
			fail("usage", "unknown request: %.60s", line);
		}
		for (i = 0; i < A->nr_roles; i++) {
			atomic_store_explicit(&A->roles[i].ctl.iters, iters, memory_order_relaxed);
			sem_post(&A->roles[i].ctl.start);
		}
		wait_ready();
		for (i = 0; i < nr_sampled; i++)
			print_sem(names[i], sampled[i]);
		printf("done\n");
		fflush(stdout);
	}
	kill_roles();
}

static int parse_cpu(const char *s)
{
	char *end;
	long cpu = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || cpu < 0 || cpu >= CPU_SETSIZE)
		fail("usage", "not a CPU number: %s", s);
	return (int)cpu;
}

static void parse_cpus(char *list)
{
	CPU_ZERO(&test_cpus);
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ","))
		CPU_SET(parse_cpu(tok), &test_cpus);
	if (CPU_COUNT(&test_cpus) == 0)
		fail("usage", "no CPU given");
}

int main(int argc, char **argv)
{
	uint64_t seed = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);
	int arg = 1;

	if (argc == 2 && strcmp(argv[1], "--check") == 0) {
		printf("ok\n");
		return 0;
	}
	if (arg < argc && strcmp(argv[arg], "--sched-ext") == 0) {
		use_sched_ext = true;
		arg++;
	}
	if (argc - arg != 2)
		fail("usage", "usage: %s [--sched-ext] adaptive CPU | fairness CPU,... | floor CPU", argv[0]);
	/* the driver dies with scxctl; its role processes die with it */
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	name_task("scxbench-driver");
	A = mmap(NULL, sizeof(*A), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (A == MAP_FAILED)
		fail("sys", "mmap: %s", strerror(errno));
	for (int i = 0; i < 4; i++)
		init_sampled_sem(&A->sems[i], seed + 0x9E3779B97F4A7C15ULL * (i + 1));

	if (strcmp(argv[arg], "adaptive") == 0) {
		static struct pair slow, fast;
		static const char *const names[] = { "fast", "slow" };
		struct sem *sampled[] = { &A->sems[2], &A->sems[0] };
		int cpu = parse_cpu(argv[arg + 1]);

		slow = (struct pair){ &A->sems[0], &A->sems[1], false, "scxbench-slow-w" };
		fast = (struct pair){ &A->sems[2], &A->sems[3], true, "scxbench-fast-w" };
		spawn("slow-ctl", cpu, pair_process, &slow);
		spawn("fast-ctl", cpu, pair_process, &fast);
		serve(names, sampled, 2);
	} else if (strcmp(argv[arg], "fairness") == 0) {
		char name[NAME_LEN];
		int cpu, n = 0;

		parse_cpus(argv[arg + 1]);
		for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
			if (!CPU_ISSET(cpu, &test_cpus))
				continue;
			snprintf(name, sizeof(name), "pinned%d", cpu);
			spawn(name, cpu, spinner_process, NULL);
			n++;
		}
		for (int i = 0; i < n; i++) {
			snprintf(name, sizeof(name), "float%d", i);
			spawn(name, -1, spinner_process, NULL);
		}
		serve(NULL, NULL, 0);
	} else if (strcmp(argv[arg], "floor") == 0) {
		static const char *const names[] = { "ping", "pong" };
		struct sem *sampled[] = { &A->sems[0], &A->sems[1] };

		spawn("ping", parse_cpu(argv[arg + 1]), floor_process, A->sems);
		serve(names, sampled, 2);
	} else {
		fail("usage", "unknown workload: %s (adaptive, fairness, floor)", argv[arg]);
	}
	return 0;
}
