"""pyland's safety paths, each forced on a real sched_ext kernel (QEMU guest), one boot for the module.

Every test asserts the counter or the message that proves its path ran:
- a policy stuck in decide() under a stress-ng mix: detached within a second of its 100 ms budget,
  exit 1 naming the policy and where it was; a pinned probe task never waits 1.5 s then;
- SIGTERM while the policy is stuck (no watchdog): exit within 2 s; a policy that swallows the
  first signal: the second one exits at once (130);
- the BPF core on its own: a stopped scheduler process (SIGSTOP) is stopped by the BPF heartbeat
  (exit 8, "no progress");
- stale decisions, the starvation rescue (a victim deep in its DSQ, a mob behind it), and decisions
  with an impossible CPU and an oversized slice (nr_stale, nr_rescued, nr_malformed, nr_clamped,
  nr_bounced);
- CPU hotplug: cpu1 offline then online under stress: enabled again within 5 s of each
  unregistration, the same process and the same loaded object (nothing loaded again), two restarts;
- an object configured without the scheduler's TGID refuses to run (ops.init fails);
- overload: a slow policy under a thousand waking threads fills a small queued ring (nr_ring_full),
  or passes the backlog limit (nr_backlog); BPF places those tasks, without starving the ones the
  policy placed, and pyland stays attached;
- a restart's second attachment of the same object: a decision left from the first is stale
  (nr_stale), and no BPF timer ran between the two.

Scenarios that leave tasks waiting for a stuck policy without a watchdog run pyland with --partial
and only their victims in SCHED_EXT, so that the script driving them is not among the waiting.
The policy's own misbehaviour is in decide(), so those runs use the synchronous mode
(--round-trip), where every enqueue waits for it; the hotplug restarts run the default, steer mode
(tests/test_pyland_steer_vm.py forces the steer mode's own paths).
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import pytest
from guest_files import SCENARIO_PRELUDE, read

from scxctl.log import json_events
from scxctl.pyland.stats_log import stats_lines

# single-threaded TCG: many enable/disable cycles (see tools.vm.qemu.accel_args)
pytestmark = [pytest.mark.vm, pytest.mark.tcg_single]

POLICIES = Path(__file__).resolve().parent / "policies"
GUEST_POLICY = "/tmp/test-policies/misbehave.py"

SCENARIO = SCENARIO_PRELUDE + r"""
P=/tmp/test-policies/misbehave.py
export ARM_FILE=/tmp/arm
snap() { echo "state=$(state) ops=$(ops)" >"$R/$1.txt"; }
now() { date +%s.%N; }
ext() {  # run a command in the SCHED_EXT class (what --partial schedules)
    python3 -c 'import os, sys
os.sched_setscheduler(0, 7, os.sched_param(0))
os.execvp(sys.argv[1], sys.argv[1:])' "$@"
}
start() {  # start NAME MODE ARGS...: pyland with the misbehaving policy, waits until enabled
    local name=$1 mode=$2; shift 2
    rm -f $ARM_FILE
    PYLAND_TEST_MODE=$mode STUCK_FILE=$R/$name.stuck_at \
        scxctl --log-format json run --round-trip --policy $P --stats-interval 1 "$@" >"$R/$name.log" 2>&1 &
    pid=$!
    wait_state enabled 120; echo $? >"$R/$name.attach.rc"
}
finish() {  # finish NAME: SIGTERM unless it already exited; its status
    kill -TERM $pid 2>/dev/null
    wait $pid; echo $? >"$R/$1.rc"
    wait_state disabled 30
    snap "$1.detached"
}
wait_file() {  # wait_file TEST PATH SECONDS: until `[ TEST PATH ]` holds, at most SECONDS
    for _ in $(seq 1 $(( $3 * 20 ))); do [ $1 "$2" ] && return 0; sleep 0.05; done
    return 1
}
flipper() {  # flipper PID SECONDS: change a task's CPU affinity back and forth
    python3 - "$@" <<'PY'
import os, sys, time
pid, end, n = int(sys.argv[1]), time.monotonic() + float(sys.argv[2]), 0
while time.monotonic() < end:
    try:
        os.sched_setaffinity(pid, {0} if n % 2 else {0, 1})
    except ProcessLookupError:  # the victim was ended first
        break
    n += 1
print(n)
PY
}
# Usage: python3 /tmp/sleeper.py SECONDS [READY]: sleeps 0.5 ms at a time; creates READY when started
cat >/tmp/sleeper.py <<'PY'
import sys, time
end = time.monotonic() + float(sys.argv[1])
if len(sys.argv) > 2:
    open(sys.argv[2], "w").close()
while time.monotonic() < end:
    time.sleep(0.0005)
PY
cat >/tmp/monitor.py <<'PY'
import sys, time
end, last = time.monotonic() + float(sys.argv[1]), None
while time.monotonic() < end:
    s = open("/sys/kernel/sched_ext/state").read().strip()
    if s != last:
        print(f"{time.clock_gettime(time.CLOCK_REALTIME):.6f} {s}", flush=True); last = s
    time.sleep(0.005)
PY
# Usage: python3 /tmp/spin.py SECONDS [COMM]: spins; prints its loops and its longest time off-CPU
cat >/tmp/spin.py <<'PY'
import sys, time
if len(sys.argv) > 2:
    open("/proc/self/comm", "w").write(sys.argv[2])
last = time.monotonic()
end, n, longest = last + float(sys.argv[1]), 0, 0.0
while (now := time.monotonic()) < end:
    longest = max(longest, now - last)
    last = now
    n += 1
print(n, f"{longest:.3f}")
PY

# 1. stuck policy, full mode, stress-ng mix, watchdog at 100 ms
start stuck stuck
# real-time: a SCHED_EXT monitor would itself wait in the scheduler being torn down, and miss states
chrt -f 50 python3 /tmp/monitor.py 120 >"$R/stuck.monitor" &
mon=$!
rm -f /tmp/probe.stop
taskset -c 0 python3 /tmp/probe.py 120 /tmp/probe.stop >"$R/stuck.probe" &
probe=$!
stress-ng --cpu 2 --sleep 2 --pipe 1 --timeout 10s >/dev/null 2>&1 &
stress=$!
sleep 3; touch $ARM_FILE
wait $pid; echo $? >"$R/stuck.rc"
snap stuck.after
sleep 2; touch /tmp/probe.stop  # the probe goes on under the default scheduler a while
wait $probe $stress; kill $mon 2>/dev/null; wait $mon 2>/dev/null
stress-ng --cpu 1 --timeout 2s >/dev/null 2>&1; echo $? >"$R/stuck.default_runs.rc"

# 2. stuck policy, no watchdog: the first SIGTERM ends it
start sigterm stuck --partial --policy-budget-ms 0
ext stress-ng --sleep 1 --sleep-max 16 --timeout 30s >/dev/null 2>&1 &
victims=$!
sleep 1; touch $ARM_FILE
wait_file -s $R/sigterm.stuck_at 5
sleep 0.5
t0=$(now); kill -TERM $pid; wait $pid; echo $? >"$R/sigterm.rc"; t1=$(now)
echo "$t0 $t1" >"$R/sigterm.times"
snap sigterm.detached
kill $victims 2>/dev/null; wait $victims 2>/dev/null

# 3. a policy that swallows the first signal: the second one exits at once
start swallow swallow --partial --policy-budget-ms 0
ext stress-ng --sleep 1 --sleep-max 16 --timeout 30s >/dev/null 2>&1 &
victims=$!
sleep 1; touch $ARM_FILE
wait_file -s $R/swallow.stuck_at 5
kill -TERM $pid; sleep 1
kill -0 $pid 2>/dev/null && echo alive >"$R/swallow.after_first" || echo gone >"$R/swallow.after_first"
t0=$(now); kill -TERM $pid; wait $pid; echo $? >"$R/swallow.rc"; t1=$(now)
echo "$t0 $t1" >"$R/swallow.times"
wait_state disabled 10; snap swallow.detached
kill $victims 2>/dev/null; wait $victims 2>/dev/null

# 4. the scheduler process stopped: the BPF heartbeat stops pyland
start sigstop slow --partial
ext stress-ng --sleep 1 --sleep-max 16 --timeout 30s >/dev/null 2>&1 &
victims=$!
sleep 1
kill -STOP $pid
wait_state disabled 10; echo $? >"$R/sigstop.disabled.rc"
kill -CONT $pid
wait $pid; echo $? >"$R/sigstop.rc"
kill $victims 2>/dev/null; wait $victims 2>/dev/null

# 5. stale decisions: a slow policy that grants direct wake-ups, so BPF places the victim's next
# wake-ups itself and the slow decision comes back after the victim slept and woke again (with the
# built-in policy's own grants, which it gives by the task's history, none came back stale in one
# run). Without idle selection every wake-up reaches ops.enqueue, where a grant applies, whatever
# the other CPU does. The victim's CPUs change under it meanwhile: a decision for a CPU it may no
# longer use is no error. The window opens once the victim sleeps in its loop: its start-up, a
# round trip per wake-up to a policy slowed on purpose, outlasted a fixed window on a loaded host.
start stale slow-grant --partial --max-backlog 64 --no-builtin-idle
rm -f /tmp/victim.ready
ext python3 /tmp/sleeper.py 90 /tmp/victim.ready &
victim=$!
wait_file -e /tmp/victim.ready 60
ls /tmp/victim.ready >"$R/stale.ready"
touch $ARM_FILE
flipper $victim 3 >"$R/stale.flips"
finish stale
kill $victim 2>/dev/null; wait $victim 2>/dev/null

# 6. starvation rescue, impossible CPUs and oversized slices: one task always put last on CPU 0,
# and behind it a mob of 48 that only the rescue runs: each one rescued comes back to the tail,
# so the victim waits deep in the DSQ with young tasks behind it.
export MOB_COMM=stress-ng-cpu
start unruly unruly --partial
touch $ARM_FILE
pids=""
for cpus in 0 0 0,1; do
    ext taskset -c $cpus python3 /tmp/spin.py 10 >/dev/null &
    pids="$pids $!"
done
ext taskset -c 0 stress-ng --cpu 48 --timeout 10s >/dev/null 2>&1 &
pids="$pids $!"
ext taskset -c 0 python3 /tmp/spin.py 10 starveme >"$R/unruly.victim" &
wait $pids $!
finish unruly
unset MOB_COMM

# 7. CPU hotplug: cpu1 offline, then online, under stress
scxctl --log-format json run --stats-interval 1 >"$R/hotplug.log" 2>&1 &
pid=$!
wait_state enabled 120; echo $? >"$R/hotplug.attach.rc"
# two hogs and 64 sleeper threads: with cpu1 off they all share one TCG vCPU. With stress-ng's
# default 1024 sleepers per worker pyland was still ejected there in one run of three (a sleeper
# not run for 5 s): an overload it survives on two CPUs (scenario 9), not yet on one.
stress-ng --cpu 2 --sleep 1 --sleep-max 64 --timeout 40s >/dev/null 2>&1 &
stress=$!
sleep 2
for step in 0 1; do
    echo $step >/sys/devices/system/cpu/cpu1/online  # returns once the CPU is off (or on)
    t0=$(now)
    sleep 0.5
    wait_state enabled 20; echo $? >"$R/hotplug.$step.rc"
    t1=$(now); echo "$t0 $t1" >"$R/hotplug.$step.times"
    pgrep -f 'scxctl --log-format json run' | tr '\n' ' ' >"$R/hotplug.$step.pids"
    sleep 2
done
kill $stress 2>/dev/null; wait $stress 2>/dev/null
echo $pid >"$R/hotplug.pid"
finish hotplug

# 8. no scheduler TGID in the configuration: ops.init refuses, reported through ops.exit
python3 - >"$R/notgid.txt" 2>&1 <<'PY'
import time
from scxctl.bpf import object as bpfobject
from scxctl.pyland.scheduler import RunOptions, open_configured
from scxctl.pyland.shared import SharedState
obj = open_configured(bpfobject.resolve(False), RunOptions())
obj.set_rodata_bytes(8, bytes(4))  # pyland_config.usersched_tgid
obj.load()
shared = SharedState(obj.map(".bss").initial_value())
link = obj.attach_struct_ops("pyland_ops")
end = time.monotonic() + 10
while shared.exit_kind() == 0 and time.monotonic() < end:
    time.sleep(0.05)
print(shared.exit_info().describe())
PY
snap notgid.after

# 9. overload: a slow policy (2 ms a task) under a thousand sleeping threads. A 16 KiB queued ring
# (about 190 tasks) fills; with a backlog limit of 16 the backlog fallback comes first. A 1 s budget:
# under this load a 2 ms sleep in decide() can take 100 ms to come back, and the watchdog is not
# what this scenario tests.
for o in ring:--ring-kib=16:--max-backlog=1000000 backlog:--max-backlog=16; do
    IFS=: read -r name a b <<<"$o"
    start $name slow --partial --policy-budget-ms 1000 $a $b
    touch $ARM_FILE
    ext stress-ng --sleep 2 --sleep-max 512 --timeout 8s >/dev/null 2>&1; echo $? >"$R/$name.stress.rc"
    snap $name.after_stress
    finish $name
done

# 10. a restart attaches the loaded object again: what the last attachment left must not act in the
# next. pyland with --partial (everything through the ring) and one SCHED_EXT task, which wakes
# once, gets its decision, and sleeps; while detached the same decision is written again, as a loop
# cut off by a restart leaves one, and the object is readied and attached as `scxctl run` does. The
# decision must be stale (the task sleeps: matching, it would put a sleeping task on a DSQ), and the
# heartbeat timer must not run between the two attachments.
python3 - >"$R/relink.txt" 2>&1 <<'PY'
import select, subprocess, sys, time
from scxctl.bpf import object as bpfobject
from scxctl.bpf.ringbuf import open_reader, open_writer
from scxctl.pyland.loop import discard_records
from scxctl.pyland.records import DECISION, PROGRESS_AT, TASK
from scxctl.pyland.scheduler import PARTIAL_OPS_MAP, RunOptions, open_configured
from scxctl.pyland.shared import SharedState

def state():
    with open("/sys/kernel/sched_ext/state") as f:
        return f.read().strip()

def wait(cond, seconds):
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True

opts = RunOptions(partial=True, builtin_idle=False, direct_wake=False, new_direct=False, round_trip=True)
obj = open_configured(bpfobject.resolve(False), opts, steer=False)
obj.load()
shared = SharedState(obj.map(".bss").initial_value())
reader, writer = open_reader(obj.map("queued").fd), open_writer(obj.map("dispatched").fd)
link = obj.attach_struct_ops(PARTIAL_OPS_MAP)
assert wait(lambda: state() == "enabled", 30), state()
child = subprocess.Popen([sys.executable, "-c", "import os, time\n"
                          "os.sched_setscheduler(0, 7, os.sched_param(0))\n"
                          "time.sleep(0.3)\nprint('asleep', flush=True)\ntime.sleep(600)\n"],
                         stdout=subprocess.PIPE, text=True)
last, asleep_at, records = None, None, []
end = time.monotonic() + 20
while time.monotonic() < end and (asleep_at is None or time.monotonic() - asleep_at < 1.0):
    records.clear()
    reader.read_batch(TASK, records, 64)
    for rec in records:  # pid, any CPU, no flags, default slice, deadline 0, its vtime, its generation
        values = (rec[0], -1, 0, 0, 0, rec[9], rec[10])
        writer.write(DECISION, *values)
        if rec[0] == child.pid:
            last = values
    if asleep_at is None and select.select([child.stdout], [], [], 0)[0]:
        child.stdout.readline()
        asleep_at = time.monotonic()
    time.sleep(0.005)
assert last is not None, "no record of the child"
link.destroy()
assert wait(lambda: shared.exit_kind() != 0, 10)
discard_records(reader)
shared.clear()
# as if a loop ran: a heartbeat still running would stamp progress_at anew (nothing is pending)
shared.counters[PROGRESS_AT] = 1
time.sleep(0.5)
timer_stopped = int(shared.get("progress_at") == 1)
shared.clear()
writer.write(DECISION, *last)
link = obj.attach_struct_ops(PARTIAL_OPS_MAP)
enabled = int(wait(lambda: state() == "enabled", 30))
time.sleep(2.0)
after = shared.snapshot()
print(f"timer_stopped={timer_stopped} enabled={enabled} exit_kind={shared.exit_kind()} "
      f"stale={after['nr_stale']} dispatched={after['nr_dispatched']}")
link.destroy()
child.kill()
PY
snap relink.after
exit 0
"""


@pytest.fixture(scope="module")
def guest(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("safety") / "safety_scenario.sh"
    script.write_text(SCENARIO)
    copy = [(str(script), "/tmp/safety_scenario.sh"), (str(POLICIES), "/tmp/test-policies")]
    # one host thread for both vCPUs: every attach and detach patches the kernel's static keys, and
    # with ten of each a multi-threaded TCG guest often died of it (int3 in update_rq_clock)
    res = vm.run("bash /tmp/safety_scenario.sh", timeout=1500, cpus=2, mem="2G", copy=copy)
    assert res.returncode == 0, f"guest run failed ({res.message}): {res.output[-3000:]}"
    return res.results


def final_stats(log: str) -> dict[str, Any]:
    """The BPF counters in the last `pyland stats` line of a log."""
    stats = stats_lines(log)
    assert stats, log[-2000:]
    return stats[-1]


def summary_counter(log: str, what: str) -> int:
    """A number from `scxctl run`'s summary line ("... 5 stale, ..."), which is printed after detach."""
    m = re.search(rf"(\d+) {what}", log)
    assert m, log[-2000:]
    return int(m.group(1))


def _when(event: dict[str, Any]) -> datetime.datetime:
    return datetime.datetime.fromisoformat(event["timestamp"])


def attached(guest: Path, name: str) -> str:
    log = read(guest, f"{name}.log")
    assert read(guest, f"{name}.attach.rc").strip() == "0", log[-2000:]
    return log


def test_stuck_policy_is_detached_within_a_second_of_its_budget(guest: Path) -> None:
    log = attached(guest, "stuck")
    assert read(guest, "stuck.rc").strip() == "1", log[-2000:]
    stuck = r"policy misbehave did not return from decide\(\) within 100 ms \(misbehave\.py:\d+\)"
    assert re.search(stuck, log), log[-2000:]
    # the watchdog slept until the BPF heartbeat told it of the call past half its budget
    tripped = [e for e in json_events(log) if e.get("event") == "policy watchdog tripped"]
    assert len(tripped) == 1 and tripped[0]["heartbeat_alarms"] >= 1, log[-2000:]
    stuck_at = float(read(guest, "stuck.stuck_at"))
    changes = [line.split() for line in read(guest, "stuck.monitor").splitlines()]
    # The first state past "enabled" (the monitor starts once pyland is enabled): "disabling", or
    # "disabled" where the former was shorter than a poll. It may come before stuck_at: the budget
    # runs from the start of the policy's call, and a call held up in its own first steps (its
    # check for the arm file, once) overran it before it got to write the time.
    left_at = [float(t) for t, s in changes if s != "enabled"]
    disabled_at = [float(t) for t, s in changes if s == "disabled"]
    assert left_at and disabled_at, changes
    # Detached within a second of the budget: "disabling" is pyland unregistered, and from there the
    # kernel's bypass mode runs every task without BPF. The kernel then moves every task back to
    # the fair class, its own work, which pyland neither does nor waits for and which takes seconds
    # on a loaded single-threaded TCG host. That part is only checked for a disable that never
    # ends; the probe below (whose window runs to a second after "disabled") shows that nothing
    # waited meanwhile.
    assert left_at[0] - stuck_at < 1.1, (stuck_at, changes)
    assert disabled_at[0] - left_at[0] < 10.0, (stuck_at, changes)
    # The probe's waits that overlap the stuck policy's time, from its getting stuck to a second
    # after pyland was detached. Its waits before that are not the stuck policy's (the same probe
    # under pyland's normal running is bounded in test_pyland_vm); they are printed beside these.
    lines = [line.split() for line in read(guest, "stuck.probe").splitlines()]
    assert lines and lines[-1][1] == "end", lines  # it ran to its end
    waits = [(float(end), float(w)) for end, w in lines[:-1]]
    since, until = min(stuck_at, left_at[0]), disabled_at[0] + 1.0
    assert float(lines[-1][0]) > until, ("the probe ended before the window did", lines[-1], until)
    during = [w for end, w in waits if end >= since and end - w <= until]
    before = [w for end, w in waits if end < since]
    print(f"\nprobe: longest wait while stuck {max(during, default=0):.3f} s; before it "
          f"{max(before, default=0):.3f} s ({len(before)} waits over 50 ms)")
    assert max(during, default=0.0) < 1.5, (stuck_at, until, waits)
    assert read(guest, "stuck.after.txt").split() == ["state=disabled", "ops=none"]
    assert read(guest, "stuck.default_runs.rc").strip() == "0"


def test_sigterm_ends_a_stuck_policy_within_two_seconds(guest: Path) -> None:
    log = attached(guest, "sigterm")
    assert read(guest, "sigterm.stuck_at").strip(), "the policy never got stuck"
    t0, t1 = map(float, read(guest, "sigterm.times").split())
    assert read(guest, "sigterm.rc").strip() == "0", log[-2000:]
    assert t1 - t0 < 2.0
    assert "pyland stopped (signal SIGTERM)" in log
    assert read(guest, "sigterm.detached.txt").split() == ["state=disabled", "ops=none"]


def test_second_signal_exits_at_once_when_the_policy_swallows_the_first(guest: Path) -> None:
    log = attached(guest, "swallow")
    assert read(guest, "swallow.after_first").strip() == "alive"
    t0, t1 = map(float, read(guest, "swallow.times").split())
    assert read(guest, "swallow.rc").strip() == "130", log[-2000:]
    assert t1 - t0 < 2.0
    assert "second SIGTERM: pyland detached, exiting at once" in log
    assert read(guest, "swallow.detached.txt").split() == ["state=disabled", "ops=none"]


def test_bpf_heartbeat_stops_pyland_when_the_scheduler_process_is_stopped(guest: Path) -> None:
    log = attached(guest, "sigstop")
    assert read(guest, "sigstop.disabled.rc").strip() == "0", log[-2000:]
    assert read(guest, "sigstop.rc").strip() == "8", log[-2000:]
    assert "pyland's BPF core stopped it: user space made no progress" in log
    # the message says why: a stopped process, not one waiting for a CPU or blocked in the kernel
    assert "its loop thread was stopped" in log, log[-2000:]


def test_decisions_for_an_older_generation_are_dropped(guest: Path) -> None:
    log = attached(guest, "stale")
    assert read(guest, "stale.ready").strip(), "the victim never started its loop"
    assert int(read(guest, "stale.flips")) > 0
    assert read(guest, "stale.rc").strip() == "0", log[-2000:]
    assert final_stats(log)["nr_direct_wakes"] > 0
    assert summary_counter(log, "stale") > 0


def test_starved_task_rescued_and_wrong_decisions_contained(guest: Path) -> None:
    log = attached(guest, "unruly")
    assert read(guest, "unruly.rc").strip() == "0", log[-2000:]
    stats = final_stats(log)
    assert stats["nr_rescued"] > 0
    loops, longest_off_cpu = read(guest, "unruly.victim").split()
    assert int(loops) > 0
    # Found deep in the DSQ before the kernel's watchdog (5 s) would eject pyland; about starve_ms
    # (1 s) plus a round of the other starving tasks' slices. The tail scan left it 3.6 s and more.
    assert float(longest_off_cpu) < 5.0, longest_off_cpu
    assert stats["nr_malformed"] > 0 and stats["nr_clamped"] > 0 and stats["nr_bounced"] > 0


def test_cpu_hotplug_restarts_pyland_in_the_same_process(guest: Path) -> None:
    """Enabled again soon after each unregistration, timed by pyland's own log: from the kernel's
    exit it saw ("pyland detached", reason kernel) to the state it confirmed ("pyland enabled").
    The script's clock around the `echo` is no measure here: with cpu1 off, the script itself
    shares the one vCPU with the stress load (28 s from the echo to its own check in one run whose
    log showed pyland enabled 2.9 s after the kernel unregistered it)."""
    log = attached(guest, "hotplug")
    pid = read(guest, "hotplug.pid").strip()
    for step in ("0", "1"):
        assert read(guest, f"hotplug.{step}.rc").strip() == "0", log[-3000:]
        assert read(guest, f"hotplug.{step}.pids").split() == [pid]
    events = json_events(log)
    gaps, reattached = [], []
    for i, e in enumerate(events):
        if e.get("event") == "pyland detached" and e.get("reason") == "kernel":
            enabled = next(x for x in events[i:] if x.get("event") == "pyland enabled")
            gaps.append((_when(enabled) - _when(e)).total_seconds())
            reattached.append(enabled)
    # The loaded object is attached again, never loaded again (load_ms 0): loading verified every
    # program on the one CPU left beside the stress load, and took up to 4.7 s of a 5.5 s gap.
    assert len(gaps) == 2 and all(g < 5.0 for g in gaps), (gaps, reattached, log[-3000:])
    assert [e["load_ms"] for e in reattached] == [0.0, 0.0], reattached
    restarts = [e for e in events if e.get("event") == "pyland restarting"]
    assert len(restarts) == 2, log[-3000:]
    assert all("going offline" in e["reason"] or "coming online" in e["reason"] or "online" in e["reason"]
               for e in restarts), restarts
    assert read(guest, "hotplug.rc").strip() == "0", log[-2000:]
    assert summary_counter(log, "restarts") == 2


def test_an_object_without_the_scheduler_tgid_refuses_to_run(guest: Path) -> None:
    """sched_ext reports an ops.init failure through ops.exit (the attach itself returns success)."""
    out = read(guest, "notgid.txt")
    assert out.startswith("ERROR_BPF") and "loaded without the scheduler's TGID" in out, out
    assert read(guest, "notgid.after.txt").split() == ["state=disabled", "ops=none"]


@pytest.mark.parametrize(("name", "counter"), [("ring", "ring-full"), ("backlog", "backlog")])
def test_overload_falls_back_to_bpf_and_stays_attached(guest: Path, name: str, counter: str) -> None:
    log = attached(guest, name)
    assert read(guest, f"{name}.stress.rc").strip() == "0", log[-2000:]
    assert read(guest, f"{name}.after_stress.txt").split() == ["state=enabled", "ops=pyland"], log[-2000:]
    assert read(guest, f"{name}.rc").strip() == "0", log[-2000:]
    assert summary_counter(log, counter) > 0, log[-2000:]
    # BPF's own placements did not starve the tasks the policy placed: put back at vtime_now, they
    # left 1300-1500 tasks a run waiting the rescue's 1 s here
    assert final_stats(log)["nr_rescued"] < 100, log[-2000:]


def test_a_restart_attachment_drops_what_the_last_one_left(guest: Path) -> None:
    out = read(guest, "relink.txt")
    fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    assert fields.get("enabled") == "1" and fields.get("exit_kind") == "0", out
    assert fields["timer_stopped"] == "1", out  # ops.exit stopped the heartbeat
    assert (fields["stale"], fields["dispatched"]) == ("1", "0"), out  # a newer generation at ops.init_task
    assert read(guest, "relink.after.txt").split() == ["state=disabled", "ops=none"]
