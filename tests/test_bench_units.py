"""Unit tests of scxctl bench's pieces: convergence, quantiles, topology, scheduler specs, futexes."""

from __future__ import annotations

import bisect
import math
import os
import random
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest

from scxctl.bench import converge as cv
from scxctl.bench.runner import TESTS, BenchOptions, _status, exit_code, validate
from scxctl.bench.scheduler import check_can_start, parse_scheduler
from scxctl.bench.stats import DIGEST_SIZE, TDigest, histogram, summarize
from scxctl.bench.topology import check_cpu, load_topology, parse_cpu_list, process_cpu_time_s
from scxctl.errors import ExitCode, ScxctlError, UsageError
from scxctl.sysfs import SysRoot

# --- convergence -----------------------------------------------------------------------------------


def test_next_iters_scales_up_clamps_and_doubles() -> None:
    assert cv.next_iters(1, 0.01, 5.0, 10.0) == 100  # ceil(1 * 5 / 0.01) = 500, clamped to x100
    assert cv.next_iters(100, 2.0, 5.0, 10.0) == 250  # ceil(100 * 5 / 2)
    assert cv.next_iters(10, 4.99, 5.0, 10.0) == 11  # at least +1
    assert cv.next_iters(7, 0.0, 5.0, 10.0) == 700
    assert cv.next_iters(50, 5.0, 5.0, 10.0) == 100  # counted, not over max: double
    assert cv.next_iters(100, 10.0, 5.0, 10.0) == 200  # exactly max is not "exceeds"
    assert cv.next_iters(100, 10.01, 5.0, 10.0) is None


def test_converge_reports_every_measurement_and_the_real_final_metric() -> None:
    """A fake clock where each iteration takes 10 ms; the metric is a function of iters."""
    now = [0.0]

    def clock() -> float:
        return now[0]

    def measure(iters: int) -> tuple[float | None, dict[str, object]]:
        now[0] += iters * 0.01
        return 1.0 / iters, {"seen": iters}

    out: list[cv.Measurement] = []
    starts: list[tuple[int, int]] = []
    final = cv.converge(measure, 0.5, 1.0, out, on_start=lambda i, n: starts.append((i, n)), clock=clock)
    assert [m.iters for m in out] == [1, 50, 100, 200]
    assert [m.counted for m in out] == [False, True, True, True]
    assert out[-1].elapsed_s > 1.0 and all(m.elapsed_s <= 1.0 for m in out[:-1])
    assert final is out[-1] and final.metric == pytest.approx(1 / 200)  # not schtest's 0.0
    assert cv.final(out) is out[-1]
    assert starts == [(0, 1), (1, 50), (2, 100), (3, 200)]
    assert out[1].to_json()["seen"] == 50


def test_final_is_none_without_counted_measurements() -> None:
    assert cv.final([cv.Measurement(1, 0.1, False, 0.5)]) is None


# --- quantiles -------------------------------------------------------------------------------------


def _hazen(ordered: list[float], q: float) -> float:
    """Hyndman & Fan's definition 5 (Hazen): the piecewise-linear quantile through the points
    ((i - 0.5) / n, x_i), flat beyond the first and last. Written from the definition, not from
    stats.py, so that it is an independent reference."""
    n = len(ordered)
    h = min(max(n * q + 0.5, 1.0), float(n))  # 1-based position
    i = int(h)
    if i >= n:
        return ordered[-1]
    return ordered[i - 1] + (h - i) * (ordered[i] - ordered[i - 1])


def test_tdigest_small_evenly_spaced_sets_are_hazen_quantiles() -> None:
    """Up to DIGEST_SIZE / 2 samples every sample is a centroid of its own: the scale function
    (_scale_q) never exceeds 2k/d, so the k-th centroid's limit q(k) n is at most k samples, one
    fewer than it would need to take a second one. Between single-sample centroids
    estimate_quantile interpolates over half the neighbouring gaps, which for evenly spaced samples
    is exactly Hazen's quantile: a golden value computed from its textbook definition, for any
    spacing, offset, size and input order."""
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randint(1, DIGEST_SIZE // 2)
        start, step = rng.uniform(-1e6, 1e6), rng.uniform(1e-3, 1e4)
        ordered = [start + step * i for i in range(n)]
        shuffled = rng.sample(ordered, n)
        d = TDigest(shuffled)
        for q in (0.0, 1e-9, 0.1, 0.25, 0.5, 0.5 + 1e-9, 0.9, 0.99, 1.0 - 1e-9, 1.0, rng.random()):
            want = _hazen(ordered, q)
            assert d.quantile(q) == pytest.approx(want, rel=1e-9, abs=1e-9 * step), (n, q, start, step)


def test_tdigest_of_nothing_has_no_quantile() -> None:
    assert TDigest([]).quantile(0.5) is None  # schtest prints "no p90" rather than a number


def _scale_q(k: float) -> float:
    """The crate's scale function for DIGEST_SIZE = d: q(k) = 2 (k/d)^2 up to the median, mirrored
    above it (1 - 2 (1 - k/d)^2); written out here, not imported, so that the tests do not borrow
    the code they check."""
    x = min(max(k / DIGEST_SIZE, 0.0), 1.0)
    return 2 * x * x if x <= 0.5 else 1.0 - 2 * (1.0 - x) ** 2


def _scale_k(q: float) -> float:
    """The inverse of _scale_q."""
    q = min(max(q, 0.0), 1.0)
    return DIGEST_SIZE * (math.sqrt(q / 2) if q <= 0.5 else 1.0 - math.sqrt((1.0 - q) / 2))


def _rank_window(q: float, n: int) -> tuple[float, float]:
    """Where the true rank of the estimate of quantile q may lie, from the t-digest's size bound
    (Dunning and Ertl, "Computing extremely accurate quantiles using t-digests"): a centroid holds
    a run of sorted samples whose ranks span at most one unit of the scale function k, so one that
    opens at rank a closes by rank n q(k(a/n) + 1), and one that closes at rank b opened no earlier
    than n q(k(b/n) - 1). estimate_quantile takes the centroid holding rank q n and clamps its
    interpolation to the means of its two neighbours, so the estimate lies between the first
    sample of the centroid below and the last sample of the centroid above. Narrow in the tails,
    where schtest reads its metrics: for 20 000 samples the window of p99 is 1.1% of the ranks
    wide (ranks 19 670 to 19 899: the maximum is outside it), the median's 8%."""
    def latest_close(opened: float) -> float:
        return n * _scale_q(_scale_k(opened / n) + 1)

    def earliest_open(closed: float) -> float:
        return n * _scale_q(_scale_k(closed / n) - 1)

    rank = q * n  # held by a centroid opened at rank <= rank + 1 and closed at rank >= rank
    return earliest_open(earliest_open(rank) - 1), latest_close(latest_close(rank + 1) + 1)


DATASETS: dict[str, Callable[[random.Random, int], list[float]]] = {
    "uniform": lambda rng, n: [rng.uniform(0, 1e6) for _ in range(n)],
    "exponential": lambda rng, n: [rng.expovariate(1 / 1000) for _ in range(n)],  # wake latencies
    "lognormal": lambda rng, n: [rng.lognormvariate(10, 2) for _ in range(n)],  # a long tail
    "ties": lambda rng, n: [float(rng.randint(0, 30)) for _ in range(n)],
    "bimodal": lambda rng, n: [rng.gauss(1e3, 10) if rng.random() < 0.9 else rng.gauss(1e6, 1e3)
                               for _ in range(n)],
    "ascending": lambda rng, n: [float(i) for i in range(n)],
}


@pytest.mark.parametrize("n", [1024, 20_000])
@pytest.mark.parametrize("shape", sorted(set(DATASETS) - {"ties"}))  # equal means: order is ambiguous
def test_tdigest_centroids_are_runs_of_sorted_samples_within_the_size_bound(shape: str, n: int) -> None:
    """What the error bound rests on, checked against the samples themselves: each centroid is the
    exact mean and count of a run of consecutive sorted samples, and apart from the sample that
    opened it each run spans at most one unit of the scale function (the k-size bound). A digest
    with coarser centroids or a wrong mean could still land inside _rank_window on smooth data."""
    rng = random.Random(f"{shape}-{n}")
    ordered = sorted(DATASETS[shape](rng, n))
    d = TDigest(ordered)
    start = 0
    for mean, weight in d.centroids:
        w = int(weight)
        assert w == weight and w >= 1
        run = ordered[start:start + w]
        assert mean == pytest.approx(statistics.fmean(run), rel=1e-9), (start, w)
        if w > 1:
            assert _scale_k((start + w) / n) - _scale_k((start + 1) / n) <= 1 + 1e-9, (start, w)
        start += w
    assert start == n


@pytest.mark.parametrize("n", [60, 1024, 20_000])
@pytest.mark.parametrize("shape", sorted(DATASETS))
def test_tdigest_quantiles_are_within_the_digests_error_bound(shape: str, n: int) -> None:
    """Against the exact order statistics of the same samples (sorted here, no digest involved):
    the estimate of each quantile must rank inside _rank_window."""
    rng = random.Random(f"{shape}-{n}")
    values = DATASETS[shape](rng, n)
    d = TDigest(values)
    ordered = sorted(values)
    assert len(d.centroids) <= DIGEST_SIZE
    assert sum(w for _, w in d.centroids) == n
    for q in (0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999):
        v = d.quantile(q)
        assert v is not None
        lowest, highest = _rank_window(q, n)
        at_most, below = bisect.bisect_right(ordered, v), bisect.bisect_left(ordered, v)
        assert at_most >= lowest and below < highest, (q, v, below, at_most, lowest, highest)


def test_summary_and_histogram() -> None:
    s = summarize([1500, 3000, 3100, 900_000], seen=7)
    assert (s.count, s.retained, s.min_ns, s.max_ns) == (7, 4, 1500, 900_000)
    assert s.p50_ns is not None and 1500 <= s.p50_ns <= 900_000
    assert sum(s.histogram) == 4
    h = histogram([10, 1999, 2000, 5_000_000_000])
    assert h[0] == 2 and h[1] == 1 and h[-1] == 1


# --- topology and /proc ------------------------------------------------------------------------------


def _cpu_tree(root: Path, online: str, present: str, cores: dict[int, tuple[int, int]]) -> SysRoot:
    base = root / "sys/devices/system/cpu"
    base.mkdir(parents=True)
    (base / "online").write_text(online + "\n")
    (base / "present").write_text(present + "\n")
    for cpu, (pkg, core) in cores.items():
        t = base / f"cpu{cpu}/topology"
        t.mkdir(parents=True)
        (t / "physical_package_id").write_text(f"{pkg}\n")
        (t / "core_id").write_text(f"{core}\n")
    return SysRoot(root)


def test_parse_cpu_list() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("5") == [5]


def test_first_hyperthread_of_first_core(tmp_path: Path) -> None:
    # cpu0/cpu2 are the hyperthreads of core 1, cpu1/cpu3 those of core 0 (package 0)
    sr = _cpu_tree(tmp_path, "0-3", "0-3", {0: (0, 1), 1: (0, 0), 2: (0, 1), 3: (0, 0)})
    topo = load_topology(sr)
    assert topo.cores == [[1, 3], [0, 2]]
    assert topo.first_hyperthread == 1


def test_check_cpu_rejects_missing_and_offline(tmp_path: Path) -> None:
    sr = _cpu_tree(tmp_path, "0", "0-1", {0: (0, 0)})
    topo = load_topology(sr)
    with pytest.raises(UsageError, match="does not exist"):
        check_cpu(topo, 7)
    with pytest.raises(UsageError, match="offline"):
        check_cpu(topo, 1)


def test_process_cpu_time_sums_threads_and_survives_odd_comm(tmp_path: Path) -> None:
    tick = os.sysconf("SC_CLK_TCK")
    for tid, (ut, st) in {"10": (30, 20), "11": (5, 5)}.items():
        d = tmp_path / "proc/10/task" / tid
        d.mkdir(parents=True)
        rest = " ".join(["S"] + ["0"] * 10 + [str(ut), str(st)] + ["0"] * 30)
        (d / "stat").write_text(f"{tid} (we ir) d) {rest}\n")
    assert process_cpu_time_s(10, SysRoot(tmp_path)) == pytest.approx(60 / tick)


# --- schedulers ----------------------------------------------------------------------------------------


def test_parse_scheduler_forms(tmp_path: Path) -> None:
    assert parse_scheduler("default").kind == "default"
    p = parse_scheduler("pyland:fifo", partial=True)
    assert (p.kind, p.policy, p.expected_ops, p.label) == ("pyland", "fifo", "pyland", "pyland:fifo")
    assert p.command[-5:] == ("run", "pyland", "--policy", "fifo", "--partial")
    binary = tmp_path / "scx_simple"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    e = parse_scheduler(str(binary), ["-v"])
    assert (e.kind, e.expected_ops, e.command) == ("external", "simple", (str(binary), "-v"))
    assert parse_scheduler(str(binary), ops_name="other").expected_ops == "other"
    with pytest.raises(UsageError, match="unknown scheduler"):
        parse_scheduler("cfs")
    with pytest.raises(UsageError, match="does not exist"):
        parse_scheduler(str(tmp_path / "scx_missing"))
    with pytest.raises(UsageError):
        parse_scheduler("default", partial=True)


def _sched_ext_tree(root: Path, state: str = "disabled", ops: str | None = None, caps: str = "") -> SysRoot:
    d = root / "sys/kernel/sched_ext"
    d.mkdir(parents=True)
    for name, value in {"state": state, "switch_all": "0", "nr_rejected": "0", "enable_seq": "3"}.items():
        (d / name).write_text(value + "\n")
    if ops:
        (d / "root").mkdir()
        (d / "root/ops").write_text(ops + "\n")
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/status").write_text(
        f"CapInh:\t0\nCapPrm:\t{caps or '1ffffffffff'}\nCapEff:\t{caps or '1ffffffffff'}\n"
        "CapBnd:\t1ffffffffff\nCapAmb:\t0\n"
    )
    return SysRoot(root)


def test_check_can_start(tmp_path: Path) -> None:
    check_can_start(_sched_ext_tree(tmp_path / "ok"))
    with pytest.raises(ScxctlError) as busy:
        check_can_start(_sched_ext_tree(tmp_path / "busy", "enabled", "rustland"))
    assert busy.value.code == ExitCode.BUSY and "rustland" in busy.value.message
    with pytest.raises(ScxctlError) as perm:
        check_can_start(_sched_ext_tree(tmp_path / "perm", caps="0"))
    assert perm.value.code == ExitCode.PERMISSION
    (tmp_path / "none").mkdir()
    with pytest.raises(ScxctlError) as unsup:
        check_can_start(SysRoot(tmp_path / "none"))
    assert unsup.value.code == ExitCode.UNSUPPORTED


def test_validate_rejects_bad_times_before_anything_runs() -> None:
    default = [parse_scheduler("default")]
    with pytest.raises(UsageError, match="greater than"):
        validate(BenchOptions(tests=["fairness"], schedulers=default, min_time=5, max_time=1))
    with pytest.raises(UsageError, match="positive"):
        validate(BenchOptions(tests=["fairness"], schedulers=default, min_time=0, max_time=1))


def test_status_and_exit_code() -> None:
    info = TESTS["adaptive-priority"]
    assert _status(info, cv.Measurement(1, 6, True, 0.2, {"unreliable": False})) == ("pass", True, False)
    assert _status(info, cv.Measurement(1, 6, True, 0.7, {"unreliable": False})) == ("fail", False, False)
    assert _status(info, cv.Measurement(1, 6, True, 0.2, {"unreliable": True})) == ("unreliable", True, True)
    assert _status(info, None) == ("unreliable", None, True)
    fair = TESTS["fairness"]
    assert _status(fair, cv.Measurement(1, 6, True, 0.6))[0] == "pass"

    def report(*statuses: str, valid: bool = True) -> dict[str, object]:
        return {"runs": [{"valid": valid, "tests": [{"status": s} for s in statuses]}]}

    assert exit_code(report("pass", "pass")) == ExitCode.OK
    assert exit_code(report("pass", "unreliable")) == ExitCode.FAILURE
    assert exit_code(report("pass", valid=False)) == ExitCode.EJECTED
