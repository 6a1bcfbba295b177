"""`scxctl bench --trace` on the host: the kernel's figures land beside the futex ones, per measurement."""

from __future__ import annotations

from typing import Any

import pytest

from scxctl.bench import ktrace
from scxctl.bench.converge import Measurement
from scxctl.bench.env import Env
from scxctl.bench.render import test_table as bench_table
from scxctl.trace import wakeup
from scxctl.trace.hist import Histogram


class CountingTracer:
    """Each read adds one more fast wake-up of 5 us and two slow ones of 40 us."""

    compile_s = 1.0

    def __init__(self, sel: wakeup.Selector) -> None:
        self.selector = sel
        self.n = 0

    def read(self) -> list[Histogram]:
        fast, slow = Histogram(), Histogram()
        fast.add(5000, self.n)
        slow.add(40_000, 2 * self.n)
        self.n += 1
        return [fast, slow]

    def close(self) -> None:
        pass


@pytest.fixture
def tracer(monkeypatch: pytest.MonkeyPatch) -> ktrace.BenchTracer:
    monkeypatch.setattr(ktrace.os, "geteuid", lambda: 0)
    monkeypatch.setattr(wakeup, "open_tracer", CountingTracer)
    return ktrace.BenchTracer()


def test_traces_the_sampled_workers_by_their_task_names(tracer: ktrace.BenchTracer) -> None:
    sel = tracer._tracer.selector  # type: ignore[attr-defined]
    assert sel.comms == ("scxbench-fast-w", "scxbench-slow-w")


def test_each_measurement_gets_its_own_interval(tracer: ktrace.BenchTracer) -> None:
    seen: list[Any] = []
    env = tracer.wrap(Env(on_done=seen.append))
    for i in range(2):
        env.on_start(i, 10)
        env.on_done(Measurement(10, 1.0, True, 0.3, {"fast": {}, "slow": {}}))
    trace = seen[-1].detail["trace"]
    assert trace["fast"]["count"] == 1 and trace["slow"]["count"] == 2
    assert 4096 <= trace["fast"]["p50_ns"] <= 5120
    assert seen[-1].to_json()["trace"] == trace


def test_table_shows_kernel_rows_only_when_traced() -> None:
    final = {"fast": {"p50_ns": 9000, "p90_ns": 12000, "p99_ns": 20000, "count": 30, "histogram": []},
             "slow": {"p50_ns": 9000, "p90_ns": 12000, "p99_ns": 20000, "count": 30, "histogram": []}}
    test = {"test": "adaptive_priority", "direction": "<", "threshold": 0.5, "status": "pass", "metric": 0.3,
            "measurements": [], "final": dict(final), "overhead": None, "error": None}
    report: dict[str, Any] = {"runs": [{"scheduler": {"name": "default"}, "valid": True, "tests": [test]}]}
    labels = lambda: [str(c) for c in bench_table(report, "adaptive_priority").columns[0]._cells]  # noqa: E731
    assert not any("kernel" in label for label in labels())
    fast = {"p50_ns": 3000, "p90_ns": 4000, "p99_ns": 9000, "count": 31, "max_ns": 9500}
    test["final"]["trace"] = {"fast": fast, "slow": None}
    assert "fast kernel wake->run p50/p90/p99" in labels()
