"""`scxctl bench` on a real sched_ext kernel (QEMU guest): default vs. pyland, side by side.

One guest boot for the module: the script runs both comparisons (JSON to /results, the human table
to a file) and a Ctrl-C check, then the tests assert on what came back. The thresholds are schtest's;
they are not weakened here: when pyland misses one, the failure message carries the exact numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from scxctl.bench.schema import REPORT

pytestmark = pytest.mark.vm

TIMES = "--min-time 3 --max-time 6"

GUEST_SCRIPT = f"""
set -u
for t in adaptive-priority fairness; do
    scxctl bench $t --compare default,pyland {TIMES} --output /results/$t.json \
        >/results/$t.txt 2>/results/$t.err
    echo $? >/results/$t.rc
done
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
    # The thresholds need vCPUs running in parallel: no single-threaded TCG fallback on panics.
    res = vm.run(GUEST_SCRIPT, timeout=900, single_on_last_retry=False)
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
