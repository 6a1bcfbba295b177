"""pyland on the Debian 7.2 kernels whose BTF lost some kfuncs' `_impl` entries (QEMU guests).

Those kfuncs cannot be called on those kernels at all (bpf/compat.h says why). Each guest forces
pyland's fallbacks for what its kernel lacks, each proven by the `compat_missing` bits ops.init sets
and by the one warning line: 7.2.11 (no idle-CPU selection, no dispatch-slot count) and 7.2.6 (no
idle-CPU pick) keep pyland's own DSQs; 7.2.12 and 7.2.9 cannot create or walk DSQs nor kick CPUs,
and pyland runs on the kernel's built-in DSQs there (7.2.9 also cannot count a DSQ). Under a stress
mix pyland (in its default, steer mode) must stay enabled and `scxctl doctor` must agree. The
archive drops a kernel once its series moves on; such a kernel is skipped by name. (The oldest
kernel, without cpu.max, is test_pyland_vm's second boot.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from guest_files import SCENARIO_PRELUDE, assert_watchdog_slept, read

from scxctl.log import json_events
from scxctl.pyland.records import COMPAT_MISSING
from scxctl.pyland.stats_log import stats_lines
from tools.vm import kernel
from tools.vm.codes import VMError

# single-threaded TCG: the older kernels meet the stale-patch flake (tools.vm.qemu.accel_args),
# and nothing here measures how fast the vCPUs run side by side
pytestmark = [pytest.mark.vm, pytest.mark.tcg_single]

SCENARIO = SCENARIO_PRELUDE + r"""
uname -r >"$R/uname.txt"
scxctl doctor --json >"$R/doctor.json" 2>"$R/doctor.err"; echo $? >"$R/doctor.rc"
scxctl --log-format json run --stats-interval 1 >"$R/run.log" 2>&1 &
pid=$!
if wait_state enabled 90; then
    echo 0 >"$R/attach.rc"
    stress-ng --cpu 2 --fork 1 --futex 1 --sleep 1 --timeout 5s >/dev/null 2>&1
    sleep 1.5
    echo "state=$(state) ops=$(ops)" >"$R/after_stress.txt"
    kill -TERM $pid
fi
wait $pid; echo $? >"$R/run.rc"
exit 0
"""

NO_SELECT_CPU_DFL, NO_PICK_IDLE_CPU, NO_DISPATCH_SLOTS = 1, 2, 4
NO_CUSTOM_DSQS, NO_KICK, NO_DSQ_ITER, NO_ERROR_REPORT, NO_NR_QUEUED = 8, 16, 32, 64, 128
NO_CGROUP_BW = 256  # cpu.max needs pyland's own DSQs (the held tasks wait in one)


def _boot(vm: Any, tmp_path_factory: pytest.TempPathFactory, version: str) -> tuple[Path, str]:
    try:
        release = kernel.prepare(version).release
    except VMError as exc:
        if "found in" not in exc.message:
            raise
        pytest.skip(f"kernel {version} is no longer installable from the archive: {exc.message}")
    script = tmp_path_factory.mktemp("compat") / "scenario.sh"
    script.write_text(SCENARIO)
    res = vm.run("bash /tmp/compat.sh", timeout=600, copy=[(str(script), "/tmp/compat.sh")], kernel=version)
    assert res.returncode == 0, f"guest run failed ({res.message}): {res.output[-3000:]}"
    assert read(res.results, "uname.txt").strip() == release
    return res.results, release


@pytest.fixture(scope="module")
def k7211(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return _boot(vm, tmp_path_factory, "7.2.11")


@pytest.fixture(scope="module")
def k726(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return _boot(vm, tmp_path_factory, "7.2.6")


@pytest.fixture(scope="module")
def k7212(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return _boot(vm, tmp_path_factory, "7.2.12")


@pytest.fixture(scope="module")
def k729(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return _boot(vm, tmp_path_factory, "7.2.9")


def _doctor_check(results: Path, cid: str) -> dict[str, Any]:
    doc = json.loads(read(results, "doctor.json"))
    return next(c for c in doc["checks"] if c["id"] == cid)


def _runs_without(results: Path, release: str, bits: int) -> None:
    log = read(results, "run.log")
    assert read(results, "attach.rc").strip() == "0", log[-2000:]
    assert read(results, "after_stress.txt").startswith("state=enabled ops=pyland"), log[-2000:]
    assert read(results, "run.rc").strip() == "0", log[-2000:]
    events = json_events(log)
    stats = stats_lines(log)
    assert stats and all(s["compat_missing"] == bits for s in stats)
    assert stats[-1]["nr_steered"] > 0  # BPF placed tasks from the policy's parameters (steer mode)
    # stress-ng's sleepers are woken by their timers' interrupts: seen only if BPF reads the
    # interrupt bits where this kernel's preempt count keeps them (7.3 moved them up a byte)
    assert stats[-1]["nr_irq_wakes"] > 0
    # alarms here: calls the single-threaded TCG host held up past half their budget; a watchdog
    # looking all the time, over 200 looks in this run
    assert_watchdog_slept(stats[-1], 40)
    warned = [e for e in events if e.get("event", "").startswith("this kernel cannot give pyland")]
    assert len(warned) == 1  # said once
    assert warned[0]["kernel"] == release
    assert warned[0]["missing"] == [what for bit, what in COMPAT_MISSING.items() if bits & bit]
    obj = _doctor_check(results, "bpf.object")
    assert obj["status"] == "ok" and obj["details"]["load"]["ok"] is True, obj


def test_7_2_11_runs_without_idle_selection_and_dispatch_slots(k7211: tuple[Path, str]) -> None:
    _runs_without(*k7211, NO_SELECT_CPU_DFL | NO_DISPATCH_SLOTS)
    # without scx_bpf_select_cpu_dfl no wake-up is dispatched to an idle CPU from select_cpu
    stats = stats_lines(read(k7211[0], "run.log"))
    assert stats[-1]["nr_direct"] == 0


def test_7_2_6_runs_without_pick_idle_cpu(k726: tuple[Path, str]) -> None:
    _runs_without(*k726, NO_PICK_IDLE_CPU)


def test_7_2_12_runs_on_the_built_in_dsqs(k7212: tuple[Path, str]) -> None:
    _runs_without(*k7212, NO_PICK_IDLE_CPU | NO_CUSTOM_DSQS | NO_KICK | NO_DSQ_ITER | NO_ERROR_REPORT
                  | NO_CGROUP_BW)
    stats = stats_lines(read(k7212[0], "run.log"))
    # no DSQ walk, no kick: the rescue scan and the heartbeat's kicks cannot have run
    assert stats[-1]["nr_rescued"] == 0 and stats[-1]["nr_timer_kicks"] == 0


def test_7_2_9_runs_on_the_built_in_dsqs_without_counting_them(k729: tuple[Path, str]) -> None:
    _runs_without(*k729, NO_SELECT_CPU_DFL | NO_PICK_IDLE_CPU | NO_DISPATCH_SLOTS | NO_CUSTOM_DSQS | NO_KICK
                  | NO_DSQ_ITER | NO_NR_QUEUED | NO_CGROUP_BW)
    stats = stats_lines(read(k729[0], "run.log"))
    assert stats[-1]["nr_direct"] == 0 and stats[-1]["nr_rescued"] == 0
