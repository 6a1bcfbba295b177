"""The non-default policies on a real sched_ext kernel (QEMU guest), one boot for the module.

For fifo and each example policy file: `scxctl run --policy SPEC` attaches (state enabled, ops
pyland), survives an 8 s stress-ng cpu+sleep+pipe mix, reports a counter of what the policy did in
its summary lines, and detaches on SIGTERM with status 0. Each policy runs in steer mode, where a
counter of its steering grows (the fifo class only sets parameters once: BPF's placements count),
and fifo and round_robin also in the synchronous mode (--round-trip), where decide() counts; the
classify example moves the cpu stressors, and no sleeper, to its background class. Then
the policy benchmark runs once under the guest's Python (Debian trixie's 3.13), which proves the
policy code runs there; its timings are distorted by TCG and are not used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from guest_files import SCENARIO_PRELUDE, read

from scxctl.pyland.stats_log import stats_lines

# single-threaded TCG: the policies' timings are not used (see above)
pytestmark = [pytest.mark.vm, pytest.mark.tcg_single]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "policies"
GUEST_EXAMPLES = "/tmp/policy-examples"  # examples/ is not part of the guest's /opt/scxctl tree
SLEEPERS = 1024  # threads of each of the two stress-ng sleep stressors (its default)
# name: (policy spec, `scxctl run` options, the counter of the summary lines that must grow)
SPECS = {
    "fifo": ("fifo", "", "nr_steered"),
    "fifo-round-trip": ("fifo", "--round-trip", "policy_decisions"),
    "round_robin-round-trip": (f"{GUEST_EXAMPLES}/round_robin.py", "--round-trip", "policy_turns"),
    "boost_comm": (f"{GUEST_EXAMPLES}/boost_comm.py", "", "policy_reclassified"),
    "classify": (f"{GUEST_EXAMPLES}/classify.py", "", "policy_class_moves"),
}

SCENARIO = SCENARIO_PRELUDE + r"""
snap() { echo "state=$(state) ops=$(ops)" >"$R/$1.txt"; }

run_policy() {  # run_policy NAME SPEC [OPTIONS]
    scxctl --log-format json run --policy "$2" $3 --stats-interval 1 >"$R/$1.log" 2>&1 &
    pid=$!
    wait_state enabled 90; echo $? >"$R/$1.attach.rc"
    snap "$1.attached"
    # a stats line before the load: counters that move once per task (a class change) grow after it
    for _ in $(seq 1 100); do grep -q '"pyland stats"' "$R/$1.log" && break; sleep 0.1; done
    stress-ng --cpu 2 --sleep 2 --sleep-max @SLEEPERS@ --pipe 1 --timeout 8s >"$R/$1.stress.txt" 2>&1
    echo $? >"$R/$1.stress.rc"
    snap "$1.after_stress"
    kill -TERM $pid
    wait $pid; echo $? >"$R/$1.rc"
    wait_state disabled 30
    snap "$1.detached"
}
@RUNS@
python3 --version >"$R/python.txt" 2>&1
python3 -m benchmarks.policy_bench --records 5000 --repeat 2 @EXAMPLES@/*.py >"$R/bench.txt" 2>&1
echo $? >"$R/bench.rc"
exit 0
"""


@pytest.fixture(scope="module")
def guest(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = "\n".join(f"run_policy {name} {spec} '{opts}'" for name, (spec, opts, _) in SPECS.items())
    script = tmp_path_factory.mktemp("policy") / "policy_scenario.sh"
    script.write_text(SCENARIO.replace("@RUNS@", runs).replace("@EXAMPLES@", GUEST_EXAMPLES)
                      .replace("@SLEEPERS@", str(SLEEPERS)))
    copy = [(str(script), "/tmp/policy_scenario.sh"), (str(EXAMPLES), GUEST_EXAMPLES)]
    res = vm.run("bash /tmp/policy_scenario.sh", timeout=900, cpus=2, mem="2G", copy=copy)
    assert res.returncode == 0, f"guest run failed ({res.message}): {res.output[-3000:]}"
    return res.results


@pytest.mark.parametrize("name", list(SPECS))
def test_policy_attaches_survives_stress_and_detaches(guest: Path, name: str) -> None:
    log = read(guest, f"{name}.log")
    assert read(guest, f"{name}.attach.rc").strip() == "0", log[-2000:]
    assert read(guest, f"{name}.attached.txt").split() == ["state=enabled", "ops=pyland"]
    assert read(guest, f"{name}.stress.rc").strip() == "0", read(guest, f"{name}.stress.txt")
    assert read(guest, f"{name}.after_stress.txt").split() == ["state=enabled", "ops=pyland"], log[-2000:]
    assert read(guest, f"{name}.rc").strip() == "0", log[-2000:]
    assert read(guest, f"{name}.detached.txt").split() == ["state=disabled", "ops=none"]


@pytest.mark.parametrize("name", list(SPECS))
def test_policy_counters_reach_the_summary_lines(guest: Path, name: str) -> None:
    _, _, counter = SPECS[name]
    stats = stats_lines(read(guest, f"{name}.log"))
    assert len(stats) >= 3, read(guest, f"{name}.log")[-2000:]
    values = [s[counter] for s in stats]
    assert values == sorted(values)
    # the first line comes before the stress starts: what an idle guest did before it is not
    # asked for, only growth under the load (new tasks, hogs changing class)
    assert values[-1] > values[0] >= 0


def test_classify_moves_the_cpu_hogs_and_no_sleeper(guest: Path) -> None:
    """The two stress-ng cpu stressors never sleep: each is moved to BACKGROUND however little of its
    CPU it gets beside the rest of the mix (a wake-up moves a hog back, so one may move more than
    once). The sleep stressors' threads wake every few milliseconds: had they been taken for hogs,
    thousands would have moved."""
    log = read(guest, "classify.log")
    stats = stats_lines(log)
    moved = stats[-1]["policy_to_background"] - stats[0]["policy_to_background"]
    assert 2 <= moved < SLEEPERS, log[-2000:]


def test_policies_run_under_the_guest_python(guest: Path) -> None:
    assert read(guest, "python.txt").startswith("Python 3.13")
    bench = read(guest, "bench.txt")
    assert read(guest, "bench.rc").strip() == "0", bench[-2000:]
    for policy in ("null", "fifo", "deadline", "round_robin.py", "boost_comm.py", "classify.py"):
        assert sum(line.startswith(policy + " ") for line in bench.splitlines()) == 2, bench
