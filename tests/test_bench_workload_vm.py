"""`scxctl bench workload` on a real sched_ext kernel: default against pyland, in one guest boot.

hackbench and stress-ng compared over rotating rounds (every run, both schedulers, medians and
intervals in the JSON); bad input refused before any scheduler is switched (enable_seq unmoved); a
run that fails recorded while the others go on; Ctrl-C while pyland runs detaches it and exits 130.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from scxctl.bench.workload_schema import REPORT
from tests.guest_files import SCENARIO_PRELUDE, read

# Nothing here measures a scheduler's speed, so the guest runs single-threaded TCG (one host core,
# beside the other single-threaded guests): it switches schedulers a dozen times, and multi-threaded
# TCG now and then executes a stale copy of the code those switches patch.
pytestmark = [pytest.mark.vm, pytest.mark.tcg_single]

SCENARIO = SCENARIO_PRELUDE + r"""
enable_seq() { cat $SX/enable_seq; }
wl() {  # wl NAME ARGS...: one comparison, its JSON, stderr and exit status under $R/NAME.*
    local name=$1; shift
    scxctl bench workload "$@" >"$R/$name.json" 2>"$R/$name.err"
    echo $? >"$R/$name.rc"
}
wl hackbench --compare default,pyland --rounds 3 --json -- hackbench -g 1 -l 50
wl stress --compare default,pyland --rounds 3 --warmup 0 --json -- \
    stress-ng --cpu 1 --fork 1 --timeout 2 --metrics

# bad input: refused before any scheduler is switched
for case in unknown missing nomatch; do
    enable_seq >"$R/bad-$case.seq_before"
    case $case in
    unknown) wl bad-$case --compare default,nosuch -- true ;;
    missing) wl bad-$case --compare default,pyland -- no-such-command ;;
    nomatch) wl bad-$case --compare default,pyland --metric 'x=never ([0-9]+)' -- echo hello ;;
    esac
    enable_seq >"$R/bad-$case.seq_after"
done

# the second run of four fails: recorded, the others go on
wl fails --compare default,pyland --rounds 2 --warmup 0 --json -- \
    sh -c 'n=$(cat /tmp/n 2>/dev/null || echo 0); echo $((n + 1)) >/tmp/n; [ "$n" -ne 1 ]'

# Ctrl-C while pyland runs the command; job control on, as in a terminal: without it bash starts a
# background job with SIGINT ignored
set -m
scxctl bench workload --compare pyland --rounds 1 --warmup 0 --quiet -- sleep 120 \
    >"$R/ctrlc.out" 2>"$R/ctrlc.err" &
bp=$!
wait_state enabled 120; echo $? >"$R/ctrlc.attached"
sleep 1
kill -INT $bp; wait $bp; echo $? >"$R/ctrlc.rc"
set +m
wait_state disabled 30; echo $? >"$R/ctrlc.detached"
pgrep -x sleep >"$R/ctrlc.sleep" || true
sync
exit 0
"""


@pytest.fixture(scope="module")
def guest(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("workload") / "scenario.sh"
    script.write_text(SCENARIO)
    res = vm.run("bash /tmp/workload_scenario.sh", timeout=1500, cpus=2, mem="2G",
                 copy=[(str(script), "/tmp/workload_scenario.sh")])
    assert res.returncode == 0, f"guest run failed ({res.message}): {res.output[-3000:]}"
    return res.results


def report(results: Path, name: str) -> dict[str, Any]:
    rc = read(results, f"{name}.rc").strip()
    assert rc == "0", f"{name}: exit {rc}: {read(results, f'{name}.err')[-2000:]}"
    data = json.loads(read(results, f"{name}.json"))
    jsonschema.validate(data, REPORT)
    return data


@pytest.mark.parametrize("name,warmup", [("hackbench", 1), ("stress", 0)])
def test_every_run_under_both_schedulers_in_rotating_order(guest: Path, name: str, warmup: int) -> None:
    rep = report(guest, name)
    runs = rep["runs"]
    assert len(runs) == 2 * (3 + warmup) and all(r["status"] == "ok" for r in runs), runs
    expected = [["default", "pyland"], ["pyland", "default"]]
    assert [o["schedulers"] for o in rep["order"]] == [expected[r % 2] for r in range(-warmup, 3)]
    for run in runs:
        # each run started from the default scheduler: the last run's scheduler was detached
        assert run["before"]["sched_ext_state"] == "disabled" and run["before"]["ops"] is None, run
        if run["scheduler"] == "pyland":
            assert run["scheduler_facts"]["ops"] == "pyland" and run["scheduler_facts"]["pid"]
        assert run["wall_s"] > 0 and run["cpu_s"] > 0
    seqs = [r["scheduler_facts"]["enable_seq"] for r in runs if r["scheduler"] == "pyland"]
    assert len(set(seqs)) == len(seqs)  # attached afresh for every run


def _print_results(rep: dict[str, Any]) -> None:
    for metric, res in rep["results"].items():
        d, p = res["schedulers"]["default"], res["schedulers"]["pyland"]
        vs = p["vs_first"]
        print(f"{metric}: default {d['summary']['median']:.4g}, pyland {p['summary']['median']:.4g}, "
              f"ratio {vs['ratio']:.3f} [{vs['ci_low']:.3f}, {vs['ci_high']:.3f}] {p['verdict']}")


@pytest.mark.parametrize("name,metric", [("hackbench", "hackbench.time_s"),
                                         ("stress", "stress-ng.cpu.bogo_ops_s"),
                                         ("stress", "stress-ng.fork.bogo_ops_s")])
def test_medians_and_intervals_of_the_recognised_metric(guest: Path, name: str, metric: str) -> None:
    rep = report(guest, name)
    _print_results(rep)
    for m in ("wall_s", "cpu_s", metric):
        res = rep["results"][m]
        for label in ("default", "pyland"):
            s = res["schedulers"][label]["summary"]
            assert s["n"] == 3 and s["min"] <= s["median"] <= s["max"], (m, label, s)
        vs = res["schedulers"]["pyland"]["vs_first"]
        assert vs["n_pairs"] == 3 and vs["ci_low"] <= vs["ratio"] <= vs["ci_high"], (m, vs)
        assert res["schedulers"]["pyland"]["verdict"] in ("same", None)  # 3 rounds: never a difference
    assert rep["results"][metric]["direction"] == ("lower" if name == "hackbench" else "higher")


@pytest.mark.parametrize("case,message", [("unknown", "unknown scheduler 'nosuch'"),
                                          ("missing", "'no-such-command' not found in PATH"),
                                          ("nomatch", "--metric x: no match")])
def test_bad_input_before_any_scheduler_is_switched(guest: Path, case: str, message: str) -> None:
    assert read(guest, f"bad-{case}.rc").strip() == "2"
    err = read(guest, f"bad-{case}.err").strip().splitlines()
    assert message in err[0] and "Traceback" not in "\n".join(err), err
    assert read(guest, f"bad-{case}.seq_before") == read(guest, f"bad-{case}.seq_after")


def test_a_failed_run_is_recorded_and_the_others_go_on(guest: Path) -> None:
    assert read(guest, "fails.rc").strip() == "1", read(guest, "fails.err")
    runs = json.loads(read(guest, "fails.json"))["runs"]
    assert [r["status"] for r in runs] == ["ok", "failed", "ok", "ok"]
    assert runs[1]["exit_status"] == 1 and runs[1]["scheduler"] == "pyland"


def test_ctrl_c_detaches_the_scheduler_and_exits_130(guest: Path) -> None:
    assert read(guest, "ctrlc.attached").strip() == "0", read(guest, "ctrlc.err")
    assert read(guest, "ctrlc.rc").strip() == "130", read(guest, "ctrlc.err")
    assert read(guest, "ctrlc.detached").strip() == "0"
    assert read(guest, "ctrlc.sleep").strip() == ""  # the command went with it
