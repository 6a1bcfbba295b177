"""`scxctl bench` on a real sched_ext kernel (QEMU guest): default vs. pyland, side by side, and
checked against an independent native implementation of schtest's tests in the same boot.

One guest boot for the module: the script runs tests/native/schtest_ref.c (written from schtest's
definitions without the bench's worker: adaptive_priority, fairness, a plain futex ping-pong) under
the default scheduler and under pyland, both `scxctl bench` comparisons, and a Ctrl-C check; the
tests then assert on what came back. The thresholds are schtest's; they are not weakened here: when
pyland misses one, the failure message carries the exact numbers.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from scxctl.bench.schema import REPORT

pytestmark = pytest.mark.vm

# The bench's last measurement is the first longer than max-time (3 s, then doubled). At 6 s a run
# under pyland, which gives adaptive_priority's slow workers little CPU, collected 15 to 41 slow
# wake-ups in one boot, against the 20 below which the bench calls the run unreliable (and this
# test fails); with max-time 8 the last measurement is the 12 s one.
TIMES = "--min-time 3 --max-time 8"

REF_ADAPTIVE_S = 10  # schtest's max-time
REF_FAIRNESS_S = 6
# The bench reports fairness as the median of its three runs; the reference is compared the same
# way: a single 6 s run of it under pyland once read 0.934 where the bench's three, in the same
# boot, read 0.971-0.979.
REF_FAIRNESS_RUNS = 3
REF_ROUND_TRIPS = 5000  # as many as the bench's floor
# A TCG guest's ping-pong latency is bimodal (11 or 20-24 us per run, for the reference as much as
# for the bench, flipping between runs a second apart), so the floor is compared in the fast mode:
# the fastest of several runs, alternated with the plain C ping-pong's, under the scheduler of the
# phase. The median of five was a coin toss between the modes: in one boot the bench's p50s under
# the default scheduler were 11.9, 21.5, 18.4, 11.7 and 29.0 us, the plain C's 11.4, 11.5, 11.4,
# 11.6 and 19.8 (medians 1.60x apart, fastest 1.03x).
FLOOR_PAIRS = 5
# The fast-wake percentiles move between runs a minute apart (the reference's own p90 was 68, 78
# and 115 us in three boots under the default scheduler, 40-92 us under pyland): under each
# scheduler they are compared as medians over the main comparison and ALT_PAIRS alternated runs of
# the bench and the reference.
ALT_PAIRS = 3
# Those runs use only the fast wake-ups (about 100 a second), not the slow ones TIMES waits for: their
# last measurement is the 6 s one.
ALT_TIMES = "--min-time 3 --max-time 5"

GUEST_SCRIPT = f"""
set -u
REF=/opt/scxctl/tests/native/build/schtest-ref
ref() {{  # ref NAME: the independent implementation's three measurements under the running scheduler
    $REF adaptive 0 {REF_ADAPTIVE_S} >/results/ref-$1-adaptive.json 2>>/results/ref.err
    for i in $(seq {REF_FAIRNESS_RUNS}); do
        $REF fairness {REF_FAIRNESS_S} >/results/ref-$1-fairness-$i.json 2>>/results/ref.err
    done
    $REF pingpong 0 {REF_ROUND_TRIPS} >/results/ref-$1-pingpong.json 2>>/results/ref.err
    for i in $(seq {FLOOR_PAIRS}); do  # `scxctl bench` with no --scheduler measures what runs now
        $REF pingpong 0 {REF_ROUND_TRIPS} >/results/floor-$1-ref-$i.json 2>>/results/ref.err
        scxctl bench adaptive-priority --min-time 0.2 --max-time 0.4 \
            --output /results/floor-$1-bench-$i.json >/dev/null 2>>/results/ref.err
    done
}}
alt() {{  # alt NAME: ALT_PAIRS runs of the reference and the bench, alternated, under the running scheduler
    for i in $(seq {ALT_PAIRS}); do
        $REF adaptive 0 {REF_ADAPTIVE_S} >/results/alt-$1-ref-$i.json 2>>/results/ref.err
        scxctl bench adaptive-priority {ALT_TIMES} --output /results/alt-$1-bench-$i.json \
            >/dev/null 2>>/results/ref.err
    done
}}
ref default
scxctl run pyland >/results/ref-pyland-run.log 2>&1 &
run=$!
for _ in $(seq 600); do [ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && break; sleep 0.1; done
cat /sys/kernel/sched_ext/root/ops >/results/ref-pyland-ops.txt 2>&1
ref pyland
alt pyland
kill -INT $run; wait $run
for t in adaptive-priority fairness; do
    scxctl bench $t --compare default,pyland {TIMES} --output /results/$t.json \
        >/results/$t.txt 2>/results/$t.err
    echo $? >/results/$t.rc
done
alt default  # a minute after the main comparison
python3 - <<'PY'
import signal, subprocess, time
def state():
    return open("/sys/kernel/sched_ext/state").read().strip()
p = subprocess.Popen(
    ["scxctl", "bench", "fairness", "--scheduler", "pyland", "--min-time", "5", "--max-time", "10"],
    stdout=subprocess.DEVNULL, stderr=open("/results/sigint.err", "w"),
    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
)
end = time.monotonic() + 120
while state() != "enabled" and p.poll() is None and time.monotonic() < end:
    time.sleep(0.1)
enabled = state()
time.sleep(3)
p.send_signal(signal.SIGINT)
rc = p.wait(60)
time.sleep(0.5)
left = subprocess.run(["pgrep", "scxbench-"], capture_output=True, text=True).stdout.split()
open("/results/sigint.json", "w").write(
    __import__("json").dumps({{"enabled_seen": enabled, "rc": rc, "state_after": state(), "left": left}})
)
PY
"""


@pytest.fixture(scope="module")
def guest(vm: Any) -> Any:
    import subprocess

    root = Path(__file__).resolve().parent
    subprocess.run(["make", "-s", "-C", str(root / "native")], check=True, capture_output=True)
    # The thresholds need vCPUs running in parallel: no single-threaded TCG fallback on panics.
    res = vm.run(GUEST_SCRIPT, timeout=1200, single_on_last_retry=False)
    assert res.message is None, f"guest harness failure: {res.message}\n{res.output[-3000:]}"
    return res


def _report(guest: Any, test: str) -> dict[str, Any]:
    path = Path(guest.results) / f"{test}.json"
    assert path.exists(), (
        f"no report for {test}: rc={_read(guest, test + '.rc')} stderr={_read(guest, test + '.err')[-1500:]}"
    )
    return json.loads(path.read_text())


def _read(guest: Any, name: str) -> str:
    p = Path(guest.results) / name
    return p.read_text() if p.exists() else "(missing)"


def _run(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in report["runs"] if r["scheduler"]["name"] == name)


def _figures(report: dict[str, Any]) -> str:
    """Every number the pyland engineers need, for failure messages."""
    lines = []
    for run in report["runs"]:
        for t in run["tests"]:
            f = t["final"] or {}
            extra = ""
            if "fast" in f:
                extra = (
                    f" fast p50/p90={f['fast']['p50_ns']}/{f['fast']['p90_ns']}ns n={f['fast']['count']}"
                    f" slow p50/p90={f['slow']['p50_ns']}/{f['slow']['p90_ns']}ns n={f['slow']['count']}"
                )
            if "cpu_time_s" in f:
                extra = f" cpu_time={f['cpu_time_s']}"
            floor = t["overhead"]["wake"] if t["overhead"] else {}
            lines.append(
                f"{run['scheduler']['name']} {t['test']}: status={t['status']} metric={t['metric']}"
                f" all={[m['metric'] for m in t['measurements'] if m['counted']]}{extra}"
                f" floor p50/p90={floor.get('p50_ns')}/{floor.get('p90_ns')}ns"
                f" valid={run['valid']} {run['invalid_reason'] or ''} {t['error'] or ''}"
            )
    return "\n".join(lines)


@pytest.mark.parametrize("test", ["adaptive-priority", "fairness"])
def test_compare_runs_both_schedulers_validly(guest: Any, test: str) -> None:
    report = _report(guest, test)
    jsonschema.validate(report, REPORT)
    assert [r["scheduler"]["name"] for r in report["runs"]] == ["default", "pyland"], _figures(report)
    assert all(r["valid"] for r in report["runs"]), _figures(report)
    assert _run(report, "pyland")["scheduler"]["ops"] == "pyland"
    assert _run(report, "default")["scheduler"]["ops"] is None
    assert int(_read(guest, f"{test}.rc")) in (0, 1), _read(guest, f"{test}.err")[-1500:]


@pytest.mark.parametrize("test", ["adaptive-priority", "fairness"])
def test_side_by_side_table(guest: Any, test: str) -> None:
    text = _read(guest, f"{test}.txt")
    header = next((ln for ln in text.splitlines() if "default" in ln and "pyland" in ln), None)
    assert header is not None, text[-3000:]
    assert header.index("default") < header.index("pyland")
    assert "harness floor" in text


def test_pyland_passes_adaptive_priority(guest: Any) -> None:
    report = _report(guest, "adaptive-priority")
    t = _run(report, "pyland")["tests"][0]
    assert t["status"] == "pass" and t["metric"] < 0.50, _figures(report)


def test_pyland_passes_fairness(guest: Any) -> None:
    report = _report(guest, "fairness")
    t = _run(report, "pyland")["tests"][0]
    assert t["status"] == "pass" and t["metric"] >= 0.60, _figures(report)


def test_default_fast_wake_figures_are_reported_beside_pylands(guest: Any) -> None:
    report = _report(guest, "adaptive-priority")
    for name in ("default", "pyland"):
        fast = _run(report, name)["tests"][0]["final"]["fast"]
        assert fast["count"] > 0 and 0 < fast["p50_ns"] <= fast["p90_ns"], _figures(report)


def test_sigint_unloads_pyland_and_stops_workloads(guest: Any) -> None:
    raw = _read(guest, "sigint.json")
    assert raw != "(missing)", guest.output[-3000:]
    r = json.loads(raw)
    assert r["enabled_seen"] == "enabled", _read(guest, "sigint.err")[-1500:]
    assert r["rc"] == 130, _read(guest, "sigint.err")[-1500:]
    assert r["state_after"] == "disabled"
    assert r["left"] == []


# --- the independent cross-check (tests/native/schtest_ref.c, same boot) -----------------------------


def _ref(guest: Any, scheduler: str, test: str) -> dict[str, Any]:
    name = test if test.startswith("floor-") else f"ref-{scheduler}-{test}"
    raw = _read(guest, f"{name}.json")
    assert raw != "(missing)" and raw.strip(), _read(guest, "ref.err")[-1500:]
    return json.loads(raw)


def test_the_reference_ran_under_pyland(guest: Any) -> None:
    assert _read(guest, "ref-pyland-ops.txt").strip() == "pyland", _read(guest, "ref-pyland-run.log")[-1500:]


def _fast_p90s(guest: Any, scheduler: str) -> tuple[list[float], list[float]]:
    """(bench, reference) fast-wake p90s: the main comparison's and every alternated pair's."""
    bench = [_run(_report(guest, "adaptive-priority"), scheduler)["tests"][0]["final"]["fast"]["p90_ns"]]
    ref = [_ref(guest, scheduler, "adaptive")["fast"]["p90_ns"]]
    for i in range(1, ALT_PAIRS + 1):
        alt = json.loads(_read(guest, f"alt-{scheduler}-bench-{i}.json"))
        ops = alt["runs"][0]["scheduler"]["ops"] or None  # what ran while the pair was measured
        assert ops == ("pyland" if scheduler == "pyland" else None), alt["runs"][0]["scheduler"]
        bench.append(alt["runs"][0]["tests"][0]["final"]["fast"]["p90_ns"])
        ref.append(json.loads(_read(guest, f"alt-{scheduler}-ref-{i}.json"))["fast"]["p90_ns"])
    return bench, ref


@pytest.mark.parametrize("scheduler", ["default", "pyland"])
def test_fast_wake_p90_is_within_2x_of_the_native_reference(guest: Any, scheduler: str) -> None:
    bench, ref = _fast_p90s(guest, scheduler)
    ratio = statistics.median(bench) / statistics.median(ref)
    print(f"\n{scheduler}: fast-wake p90 bench {[round(v) for v in bench]} ns, reference "
          f"{[round(v) for v in ref]} ns: medians {ratio:.2f}x")
    assert 0.5 <= ratio <= 2.0, _figures(_report(guest, "adaptive-priority"))


def test_pyland_verdict_agrees_with_the_native_reference(guest: Any) -> None:
    """pyland's ratio rests on hundreds of slow wake-ups in both implementations. The default
    scheduler's does not (its controller preempts the slow worker before it sleeps: 10-60 slow
    samples, a p90 that is the third-largest of them), so its verdict flips between runs of either
    implementation, and the percentiles above are the comparison there."""
    report = _report(guest, "adaptive-priority")
    t = _run(report, "pyland")["tests"][0]
    ref = _ref(guest, "pyland", "adaptive")
    print(f"\npyland: adaptive_priority bench {t['metric']} (slow n={t['final']['slow']['count']}), "
          f"reference {ref['metric']} (slow n={ref['slow']['count']})")
    assert min(t["final"]["slow"]["count"], ref["slow"]["count"]) >= 20, _figures(report)
    assert (t["metric"] < 0.5) == (ref["metric"] < 0.5), _figures(report)


@pytest.mark.parametrize("scheduler", ["default", "pyland"])
def test_fairness_is_within_003_of_the_native_reference(guest: Any, scheduler: str) -> None:
    report = _report(guest, "fairness")
    mine = _run(report, scheduler)["tests"][0]["metric"]
    refs = [_ref(guest, scheduler, f"fairness-{i}")["metric"] for i in range(1, REF_FAIRNESS_RUNS + 1)]
    ref = statistics.median(refs)
    print(f"\n{scheduler}: fairness bench {mine}, reference {ref:.4f} (median of {refs})")
    assert abs(mine - ref) <= 0.03, f"reference runs {refs}\n" + _figures(report)


@pytest.mark.parametrize("scheduler", ["default", "pyland"])
def test_harness_floor_is_within_1_5x_of_a_plain_c_ping_pong(guest: Any, scheduler: str) -> None:
    floors, plains = [], []
    for i in range(1, FLOOR_PAIRS + 1):
        bench = _ref(guest, scheduler, f"floor-{scheduler}-bench-{i}")
        floors.append(bench["runs"][0]["tests"][0]["overhead"]["wake"])
        plains.append(_ref(guest, scheduler, f"floor-{scheduler}-ref-{i}")["wake"])
    floor = min(f["p50_ns"] for f in floors)
    plain = min(p["p50_ns"] for p in plains)
    pairs = [(round(f["p50_ns"]), p["p50_ns"]) for f, p in zip(floors, plains, strict=True)]
    print(f"\n{scheduler}: fastest floor p50 {floor:.0f} ns, plain C ping-pong {plain:.0f} ns: "
          f"{floor / plain:.2f}x (pairs {pairs})")
    assert floor / plain <= 1.5, pairs


def test_vs_default_ratios_are_reported(guest: Any) -> None:
    report = _report(guest, "adaptive-priority")
    base = _run(report, "default")["tests"][0]["final"]
    t = _run(report, "pyland")["tests"][0]
    for side in ("fast", "slow"):
        for q in ("p50", "p90", "p99"):
            want = round(t["final"][side][f"{q}_ns"] / base[side][f"{q}_ns"], 3)
            assert t["vs_default"][side][q] == want
    assert "vs default" in _read(guest, "adaptive-priority.txt")
