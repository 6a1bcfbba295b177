"""`scxctl trace wakeup` in the guest, against loads that count and time their own wake-ups.

One boot (with the kernel's headers, as linux-headers-RELEASE installs them): under the default
scheduler and then under pyland, a futex ping-pong, a sleep/wake load (a sleeper woken once a
millisecond by another process) and a timed-sleep load (benchmarks/trace_load.py), each traced with
`--comm`; a `--cgroup` trace with the same load inside and outside the cgroup;
`scxctl doctor`'s bcc check; and, with the headers unmounted again, the exit-7 error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.guest_files import SCENARIO_PRELUDE, read

pytestmark = pytest.mark.vm

LOAD_S = 3
SCENARIO = SCENARIO_PRELUDE + rf"""
uname -r >"$R/uname.txt"
# traced NAME TRACE-ARGS... -- LOAD-COMMAND...: the load starts once the tracer is attached
traced() {{
    local name=$1; shift
    local targs=()
    while [ "$1" != -- ]; do targs+=("$1"); shift; done
    shift
    local t0=$(date +%s.%N)
    scxctl trace wakeup "${{targs[@]}}" --duration {LOAD_S + 3} --json \
        >"$R/$name.trace.json" 2>"$R/$name.trace.err" &
    local tp=$!
    for _ in $(seq 1 1200); do
        grep -q "^tracing" "$R/$name.trace.err" 2>/dev/null && break
        kill -0 $tp 2>/dev/null || break
        sleep 0.1
    done
    echo "$(date +%s.%N) $t0" >"$R/$name.attach_s"
    "$@" >"$R/$name.load.json" 2>"$R/$name.load.err"
    wait $tp; echo $? >"$R/$name.trace.rc"
}}
load() {{ python3 -m benchmarks.trace_load "$@" --seconds {LOAD_S}; }}

for phase in default pyland; do
    if [ $phase = pyland ]; then
        scxctl --log-format json run >"$R/pyland.log" 2>&1 &
        spid=$!
        wait_state enabled 90; echo $? >"$R/pyland.attach.rc"
    fi
    traced $phase-pp --comm scxtpp -- load pingpong --name scxtpp
    traced $phase-sw --comm scxtsw -- load wake --name scxtsw
    traced $phase-tm --comm scxttm -- load sleep --name scxttm
    if [ $phase = pyland ]; then
        echo "$(ops)" >"$R/pyland.ops_during"
        kill -TERM $spid; wait $spid; echo $? >"$R/pyland.rc"
        wait_state disabled 30
    fi
done

# bench --trace under the default scheduler: the kernel's figures beside the futex-measured ones
scxctl bench adaptive-priority --trace --min-time 2 --max-time 4 --json \
    --output "$R/bench-trace.json" >/dev/null 2>"$R/bench-trace.err"
echo $? >"$R/bench-trace.rc"

# --cgroup: the same load inside and outside the cgroup; only the inside one counts
mkdir -p /sys/fs/cgroup/scxtrace
python3 -m benchmarks.trace_load sleep --name scxtout --seconds {LOAD_S + 8} >"$R/cg-outside.load.json" &
opid=$!
traced cg --cgroup /sys/fs/cgroup/scxtrace -- load sleep --name scxtin --cgroup /sys/fs/cgroup/scxtrace
wait $opid

scxctl doctor --json >"$R/doctor.json" 2>"$R/doctor.err"

# no headers: what a machine without linux-headers-RELEASE sees
rel=$(uname -r)
for d in /usr/src/linux-headers-*; do umount "$d"; done
scxctl trace wakeup --comm x --duration 1 >"$R/noheaders.out" 2>"$R/noheaders.err"
echo $? >"$R/noheaders.rc"
scxctl doctor --json >"$R/doctor-noheaders.json" 2>/dev/null
sync
exit 0
"""


@pytest.fixture(scope="module")
def guest(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import subprocess

    root = Path(__file__).resolve().parent.parent
    subprocess.run(["make", "-s", "-C", str(root / "benchmarks" / "native")], check=True,
                   capture_output=True)
    script = tmp_path_factory.mktemp("trace") / "scenario.sh"
    script.write_text(SCENARIO)
    res = vm.run("bash /tmp/trace_scenario.sh", timeout=900, cpus=2, mem="2G", headers=True,
                 copy=[(str(script), "/tmp/trace_scenario.sh")], single_on_last_retry=False)
    assert res.returncode == 0, f"guest run failed ({res.message}): {res.output[-3000:]}"
    return res.results


def _traced(results: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    rc = read(results, f"{name}.trace.rc").strip()
    assert rc == "0", read(results, f"{name}.trace.err")[-2000:]
    return json.loads(read(results, f"{name}.trace.json")), json.loads(read(results, f"{name}.load.json"))


def _p50s(results: Path, name: str) -> tuple[int, int]:
    """(traced p50, the load's own p50) in ns, both present."""
    trace, load = _traced(results, name)
    got, want = trace["total"]["p50_ns"], load["p50_ns"]
    assert got and want, (trace["total"], load)
    return got, want


PHASES = ("default", "pyland")
CASES = [f"{phase}-{load}" for phase in PHASES for load in ("pp", "sw", "tm")]
# the loads whose own clock starts where the wake-up starts (the waker's FUTEX_WAKE)
WOKEN_BY_A_TASK = [f"{phase}-{load}" for phase in PHASES for load in ("pp", "sw")]


@pytest.mark.parametrize("name", CASES)
def test_sample_count_matches_the_loads_own_wakeups(guest: Path, name: str) -> None:
    trace, load = _traced(guest, name)
    assert trace["schema"] == "scxctl.trace.wakeup/1"
    got, want = trace["total"]["count"], load["wakeups"]
    assert want > 100, load
    assert abs(got - want) <= 0.10 * want, f"traced {got} wake-ups, the load counted {want}"


@pytest.mark.parametrize("name", CASES)
def test_p50_is_part_of_what_the_load_itself_measured(guest: Path, name: str) -> None:
    # The load (native, benchmarks/native/wake_load.c) times from just before FUTEX_WAKE (or from
    # the sleep's end) to just after its wait returns; the kernel's wake -> run delay lies inside
    # that window, so it is at most the load's figure.
    got, want = _p50s(guest, name)
    print(f"\n{name}: traced p50 {got} ns, the load measured {want} ns: {want / got:.2f}x")
    assert 1_000 <= got <= want, f"traced p50 {got} ns, the load measured {want} ns"


@pytest.mark.parametrize("name", WOKEN_BY_A_TASK)
def test_p50_is_within_2x_of_what_the_load_itself_measured(guest: Path, name: str) -> None:
    # Where the load's clock starts at the waker's FUTEX_WAKE, what lies outside the traced window
    # is the two syscalls' entry and exit: the window must hold most of the load's figure. (The
    # timed sleep is left out: its oversleep also holds the timer interrupt's lateness, under TCG
    # more than the wake-up itself, which happens before any wake-up a tracer can see.)
    got, want = _p50s(guest, name)
    assert want <= 2 * got, f"traced p50 {got} ns, the load measured {want} ns: {want / got:.2f}x"


@pytest.mark.parametrize("name", CASES)
def test_waits_traced_are_the_waits_the_kernel_counted(guest: Path, name: str) -> None:
    """The independent check of what the tracer samples: the kernel's sched_info accounting of the
    load's threads (schedstat: the times they got a CPU after waiting for one, woken or preempted)
    counts the same waits through code that shares nothing with the tracer. The mean delays are
    printed, not compared: under TCG schedstat's run_delay (the run-queue clock) came out 1.4-12x
    below the tracer's bpf_ktime_get_ns intervals for the same waits, the widest gap under the
    default scheduler, which these tests cannot settle."""
    trace, load = _traced(guest, name)
    count, mean = trace["total"]["count"], trace["total"]["mean_ns"]
    runs, delay = load["runs"], load["run_delay_ns"]
    assert runs and delay, load
    print(f"\n{name}: traced {count} waits, mean {mean} ns; schedstat {runs} waits, mean "
          f"{delay / runs:.0f} ns")
    # the trace also sees the load's start and end around the load's own window: a few waits more
    assert abs(count - runs) <= 0.02 * runs, (trace["total"], load)


def test_pyland_was_the_scheduler_during_its_phase(guest: Path) -> None:
    assert read(guest, "pyland.attach.rc").strip() == "0", read(guest, "pyland.log")[-2000:]
    assert read(guest, "pyland.ops_during").strip() == "pyland"


def test_cgroup_keeps_only_that_cgroups_tasks(guest: Path) -> None:
    trace, inside = _traced(guest, "cg")
    outside = json.loads(read(guest, "cg-outside.load.json"))
    got = trace["total"]["count"]
    assert outside["wakeups"] > 0.5 * inside["wakeups"]  # the outside load ran alongside
    assert abs(got - inside["wakeups"]) <= 0.10 * inside["wakeups"], (got, inside, outside)
    assert trace["filter"]["cgroup"]["path"] == "/sys/fs/cgroup/scxtrace"


def test_doctor_bcc_check_ok_with_headers(guest: Path) -> None:
    checks = {c["id"]: c for c in json.loads(read(guest, "doctor.json"))["checks"]}
    assert checks["bcc"]["status"] == "ok", checks["bcc"]
    assert checks["bcc"]["details"]["compiled"] is True


def test_without_headers_one_line_exit_7(guest: Path) -> None:
    rel = read(guest, "uname.txt").strip()
    assert read(guest, "noheaders.rc").strip() == "7"
    err = read(guest, "noheaders.err").strip().splitlines()
    assert len(err) == 1, err
    assert f"apt install linux-headers-{rel}" in err[0]
    checks = {c["id"]: c for c in json.loads(read(guest, "doctor-noheaders.json"))["checks"]}
    assert checks["bcc"]["status"] == "warn"
    assert f"linux-headers-{rel}" in (checks["bcc"]["hint"] or "")


def test_time_to_first_result_is_reported(guest: Path) -> None:
    trace, _ = _traced(guest, "default-pp")
    assert 0 < trace["compile_s"] < 120


def test_bench_trace_puts_the_kernels_figures_beside_the_futex_ones(guest: Path) -> None:
    assert read(guest, "bench-trace.rc").strip() in ("0", "1"), read(guest, "bench-trace.err")[-2000:]
    report = json.loads(read(guest, "bench-trace.json"))
    assert report["options"]["trace"] is True and report["options"]["trace_compile_s"] > 0
    counted = [m for m in report["runs"][0]["tests"][0]["measurements"] if m["counted"]]
    assert counted, report["runs"][0]["tests"][0]
    for m in counted:
        kernel = m["trace"]
        assert "sched_waking" in kernel["source"]
        for side in ("fast", "slow"):
            assert kernel[side]["count"] > 0 and kernel[side]["p50_ns"] > 0, (side, kernel[side])
            print(f"\nbench {side}: futex p50 {m[side]['p50_ns']} ns over {m[side]['count']} wake-ups; "
                  f"kernel p50 {kernel[side]['p50_ns']} ns over {kernel[side]['count']}")
        # the kernel counts every wake-up of the fast worker (its timer's too), the futex only the
        # sampled semaphore waits: at least as many
        assert kernel["fast"]["count"] >= m["fast"]["count"], (kernel["fast"], m["fast"])
