"""`scxctl bench workload` on the host: output recognisers, the A/B statistics, and the command itself
with real commands under the default scheduler (an A/A comparison: `--compare default,default`).

The runs under pyland are in tests/test_bench_workload_vm.py (a sched_ext kernel in the guest).
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from interrupt import sigint_default

from scxctl.bench import ab_stats, parsers
from scxctl.bench import workload as workload_module
from scxctl.bench.workload import (
    WorkloadOptions,
    parse_compare,
    resolve_command,
    rotated,
    run_workload,
)
from scxctl.bench.workload_render import describe_run
from scxctl.bench.workload_schema import REPORT
from scxctl.errors import ExitCode, UsageError
from tests.fakeroot import FakeRoot

DATA = Path(__file__).parent / "data" / "workload"


def fixture(name: str) -> str:
    return (DATA / name).read_text()


def by_name(text: str) -> dict[str, parsers.Metric]:
    return {m.name: m for m in parsers.recognise(text)}


# --- recognisers, on real outputs of each tool -----------------------------------------------------


def test_schbench_percentiles_and_rps() -> None:
    got = by_name(fixture("schbench.txt"))
    assert {k: v.value for k, v in got.items()} == {
        "schbench.wakeup_p50_us": 29, "schbench.wakeup_p90_us": 1710, "schbench.wakeup_p99_us": 5032,
        "schbench.request_p50_us": 6760, "schbench.request_p90_us": 13168,
        "schbench.request_p99_us": 24928, "schbench.rps": 225.67,
    }
    assert got["schbench.rps"].direction == "higher" and got["schbench.wakeup_p99_us"].direction == "lower"


def test_schbench_takes_the_last_report() -> None:
    """With -i, schbench prints a report every interval: the final one is the run's."""
    final = fixture("schbench.txt")
    early = final.replace("50.0th: 29 ", "50.0th: 999 ").replace("average rps: 225.67", "average rps: 1.00")
    assert by_name(early + final)["schbench.wakeup_p50_us"].value == 29
    assert by_name(early + final)["schbench.rps"].value == 225.67


def test_hackbench_and_perf_bench() -> None:
    assert by_name(fixture("hackbench.txt")) == {
        "hackbench.time_s": parsers.Metric("hackbench.time_s", 0.037, "lower", "s", "hackbench")}
    messaging = by_name(fixture("perf-messaging.txt"))
    assert {k: v.value for k, v in messaging.items()} == {"messaging.time_s": 0.087}
    pipe = by_name(fixture("perf-pipe.txt"))
    assert list(pipe) == ["pipe.ops_s"] and pipe["pipe.ops_s"].value == 22413
    assert pipe["pipe.ops_s"].direction == "higher"


def test_stress_ng_bogo_ops_per_stressor() -> None:
    got = by_name(fixture("stress-ng-0.15.txt"))
    assert {k: v.value for k, v in got.items()} == {
        "stress-ng.cpu.bogo_ops_s": 1516.86, "stress-ng.fork.bogo_ops_s": 1949.37}


def test_cyclictest_per_thread_lines() -> None:
    got = {k: v.value for k, v in by_name(fixture("cyclictest-q.txt")).items()}
    assert got == {"cyclictest.T0.min_us": 35, "cyclictest.T0.avg_us": 94, "cyclictest.T0.max_us": 1200,
                   "cyclictest.T1.min_us": 64, "cyclictest.T1.avg_us": 94, "cyclictest.T1.max_us": 3289}


def _independent_samples(text: str, thread: int) -> list[float]:
    """Every sample listed by its bucket, overflows as infinity, sorted."""
    lines = text.splitlines()
    start = lines.index("# Histogram") + 1
    samples: list[float] = []
    for line in lines[start:]:
        if line.startswith("#"):
            break
        cols = line.split()
        samples += [float(cols[0])] * int(cols[1 + thread])
    over = next(ln for ln in lines if ln.startswith("# Histogram Overflows:")).split(":")[1].split()
    samples += [math.inf] * int(over[thread])
    return sorted(samples)


def _independent_percentile(text: str, thread: int, pct: int) -> float:
    """The value at rank ceil(pct/100 n) of every sample."""
    samples = _independent_samples(text, thread)
    return samples[math.ceil(pct / 100 * len(samples)) - 1]


def test_cyclictest_histogram_gives_percentiles_and_summary() -> None:
    text = fixture("cyclictest-hist.txt")
    got = by_name(text)
    for t in (0, 1):
        for pct in (50, 90, 99):
            assert got[f"cyclictest.T{t}.p{pct}_us"].value == _independent_percentile(text, t, pct)
    assert got["cyclictest.T0.p50_us"].value < got["cyclictest.T0.p99_us"].value  # a real spread
    mins = next(ln for ln in text.splitlines() if ln.startswith("# Min Latencies")).split(":")[1].split()
    assert [got[f"cyclictest.T{t}.min_us"].value for t in (0, 1)] == [float(x) for x in mins]


def test_cyclictest_histogram_counts_samples_at_or_over_a_bound() -> None:
    text = fixture("cyclictest-hist.txt")
    hist = parsers.cyclic_histogram(text)
    assert hist is not None and hist.threads == 2
    for t in (0, 1):
        samples = _independent_samples(text, t)
        assert hist.total(t) == len(samples)
        for us in (0, 50, 100, 1000, 10**6):
            assert hist.at_or_over(t, us) == sum(1 for v in samples if v >= us), (t, us)
    assert parsers.cyclic_histogram("T: 0 ( 1) P: 0 I: 1000 C: 5 Min: 1 Act: 2 Avg: 3 Max: 4\n") is None


def test_cyclictest_p99_among_overflows_is_left_out() -> None:
    text = "# Histogram\n000000 000001\n000001 000000\n# Histogram Overflows: 00005\n"
    got = by_name(text)
    assert "cyclictest.T0.p99_us" not in got and "cyclictest.T0.p90_us" not in got
    assert "cyclictest.T0.p50_us" not in got  # 1 sample of 6 in the histogram: the median overflowed


def test_custom_metrics() -> None:
    m = parsers.parse_custom(r"lat=latency: ([0-9.]+) ms:lower")
    assert (m.name, m.direction) == ("lat", "lower")
    assert m.find("latency: 1.5 ms\nlatency: 2.25 ms\n") == parsers.Metric("lat", 2.25, "lower", "", "custom")
    assert m.find("nothing here") is None
    # a regex may itself contain ':'; only a trailing :higher/:lower is a direction
    assert parsers.parse_custom(r"t=a:b ([0-9]+)").pattern.pattern == "a:b ([0-9]+)"
    assert parsers.parse_custom("n=[0-9,]+").find("total 1,234,567\n").value == 1234567
    assert parsers.parse_custom("ops=([0-9]+) ops:higher").direction == "higher"


@pytest.mark.parametrize("spec,message", [
    ("noequals", "expected NAME=REGEX"),
    ("bad name=x", "NAME must be"),
    ("wall_s=x", "always measured"),
    ("x=(", "invalid regular expression"),
    ("x=(a)(b)", "one group"),
])
def test_custom_metric_errors(spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parsers.parse_custom(spec)
    with pytest.raises(UsageError, match="twice"):
        parsers.custom_metrics(["a=x", "a=y"])


# --- the A/B statistics ------------------------------------------------------------------------------


def test_order_statistic_interval_starts_at_six_rounds() -> None:
    assert ab_stats.MIN_VERDICT_ROUNDS == 6  # 2 / 2**6 = 3.1% <= 5%; with 5, 6.25%
    assert [ab_stats._order_stat_rank(n) for n in (5, 6, 8, 9, 12, 20)] == [0, 1, 1, 2, 3, 6]


def test_paired_ratio_point_and_pairing() -> None:
    r = ab_stats.paired_ratio([10, 12, None, 11], [20, 24, 30, None])
    assert r is not None and r.n_pairs == 2 and r.ratio == pytest.approx(2.0)
    assert r.round_ratios == (2.0, 2.0) and r.low <= r.ratio <= r.high
    assert ab_stats.paired_ratio([None], [1.0]) is None
    assert ab_stats.paired_ratio([0.0, 1.0], [1.0, 1.0]) is None  # a zero base has no ratio


def test_verdicts_need_an_interval_without_one_and_enough_rounds() -> None:
    slower = ab_stats.paired_ratio([1.0] * 6, [1.2, 1.25, 1.3, 1.22, 1.27, 1.21])
    assert ab_stats.verdict(slower, "lower") == "worse" and ab_stats.verdict(slower, "higher") == "better"
    assert ab_stats.verdict(slower, None) == "more"
    five = ab_stats.paired_ratio([1.0] * 5, [1.2, 1.25, 1.3, 1.22, 1.27])
    assert five is not None and five.excludes_one() and ab_stats.verdict(five, "lower") is None
    mixed = ab_stats.paired_ratio([1.0] * 8, [0.9, 1.1, 1.05, 0.95, 1.0, 1.02, 0.98, 1.01])
    assert ab_stats.verdict(mixed, "lower") == "same"


@pytest.mark.parametrize("n", [6, 8, 12])
def test_equal_schedulers_get_a_verdict_at_most_5_percent_of_the_time(n: int) -> None:
    """Simulated A/A comparisons (seeded): the 95% interval must hold its level at small n."""
    rng = random.Random(n)
    trials, wrong = 400, 0
    for _ in range(trials):
        a = [rng.lognormvariate(0, 0.1) for _ in range(n)]
        b = [rng.lognormvariate(0, 0.1) for _ in range(n)]
        ratio = ab_stats.paired_ratio(a, b, resamples=300, seed=rng.randrange(1 << 30))
        wrong += ab_stats.verdict(ratio, "lower") in ("better", "worse")
    assert wrong / trials <= 0.05, f"{wrong} false verdicts in {trials}"


def test_a_real_difference_is_found() -> None:
    rng = random.Random(7)
    found = 0
    for _ in range(100):
        a = [rng.lognormvariate(0, 0.1) for _ in range(10)]
        b = [1.3 * rng.lognormvariate(0, 0.1) for _ in range(10)]
        found += ab_stats.verdict(ab_stats.paired_ratio(a, b, resamples=300), "lower") == "worse"
    assert found >= 90


# --- options ------------------------------------------------------------------------------------------


def test_rotation() -> None:
    assert [rotated(["a", "b", "c"], i) for i in range(-1, 4)] == [
        ["c", "a", "b"], ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_parse_compare(tmp_path: Path) -> None:
    binary = tmp_path / "scx_simple"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    specs = parse_compare(f"default, pyland:fifo,{binary} -f,default")
    assert [s.label for s in specs] == ["default", "pyland:fifo", "scx_simple -f", "default#2"]
    assert specs[2].command == (str(binary), "-f") and specs[2].expected_ops == "simple"
    with pytest.raises(UsageError, match="unknown scheduler"):
        parse_compare("default,cfs")
    with pytest.raises(UsageError, match="at least one"):
        parse_compare(" , ")


def test_resolve_command(tmp_path: Path) -> None:
    assert resolve_command(["sh", "-c", "true"]) == ["sh", "-c", "true"]
    with pytest.raises(UsageError, match="not found in PATH"):
        resolve_command(["no-such-command-xyz"])
    with pytest.raises(UsageError, match="does not exist"):
        resolve_command([str(tmp_path / "missing")])
    with pytest.raises(UsageError, match="no command"):
        resolve_command([])


# --- the command, for real -------------------------------------------------------------------------------


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["SCXCTL_DATA_DIR"] = str(tmp / "data")
    env.pop("SCXCTL_SYSROOT", None)
    return env


def workload(args: list[str], tmp: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scxctl", "bench", "workload", *args], env=_env(tmp),
                          capture_output=True, text=True, timeout=timeout)


def report_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    report = json.loads(proc.stdout)
    jsonschema.validate(report, REPORT)
    return report


def test_a_a_comparison_of_a_real_command(tmp_path: Path) -> None:
    """The default scheduler against itself, 5 rounds of hackbench: nothing may be called different.

    With 5 rounds no interval reaches 95% distribution-free, so no verdict but "same" can come; the
    interval excludes 1 only where every round's ratio fell on one side (a 1-in-16 event for equal
    schedulers), which the assertion checks from the round ratios themselves.
    """
    proc = workload(["--compare", "default,default", "--rounds", "5", "--warmup", "1", "--json", "--",
                     "hackbench", "-g", "1", "-l", "20"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = report_of(proc)
    runs = report["runs"]
    assert len(runs) == 12 and all(r["status"] == "ok" for r in runs)
    assert [o["schedulers"][0] for o in report["order"]] == ["default#2", "default", "default#2",
                                                             "default", "default#2", "default"]
    assert [o["round"] for o in report["order"]] == [-1, 0, 1, 2, 3, 4]
    for name in ("wall_s", "hackbench.time_s"):
        res = report["results"][name]
        assert res["schedulers"]["default"]["summary"]["n"] == 5
        other = res["schedulers"]["default#2"]
        vs = other["vs_first"]
        assert vs["n_pairs"] == 5 and vs["ci_low"] <= vs["ratio"] <= vs["ci_high"]
        one_sided = all(r > 1 for r in vs["round_ratios"]) or all(r < 1 for r in vs["round_ratios"])
        assert vs["ci_low"] <= 1 <= vs["ci_high"] or one_sided, vs
        assert other["verdict"] in ("same", None)
        assert 0.5 < vs["ratio"] < 2.0
    for r in runs:
        assert r["cpu_s"] > 0 and r["wall_s"] > r["harness_cpu_s"]
        assert r["metrics"]["hackbench.time_s"] <= r["wall_s"]
        assert r["before"]["loadavg_1m"] is not None
    assert report["harness"]["wall_s_median"] < 0.05
    saved = list((tmp_path / "data" / "bench").glob("*-workload-*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["runs"] == runs


def test_deterministic_outputs_and_kept_files(tmp_path: Path) -> None:
    """A fake load printing schbench's output, a custom metric beside it; every output kept."""
    keep = tmp_path / "out"
    src = DATA / "schbench.txt"
    proc = workload(["--compare", "default,default", "--rounds", "2", "--warmup", "1", "--json",
                     "--metric", r"rps2=average rps: ([0-9.]+):higher", "--keep-output", str(keep), "--",
                     "cat", str(src)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = report_of(proc)
    assert report["probe"]["status"] == "ok" and report["probe"]["metrics"]["rps2"] == 225.67
    assert sorted(p.name for p in keep.iterdir()) == [
        "probe.log", "round01-1-default.log", "round01-2-default_2.log", "round02-1-default_2.log",
        "round02-2-default.log", "warmup01-1-default_2.log", "warmup01-2-default.log"]
    assert all(p.read_text() == src.read_text() for p in keep.iterdir())
    res = report["results"]
    assert res["schbench.wakeup_p99_us"]["schedulers"]["default"]["values"] == [5032, 5032]
    assert res["rps2"]["direction"] == "higher"
    assert res["rps2"]["schedulers"]["default#2"]["vs_first"]["ratio"] == 1


def test_failed_and_timed_out_runs_are_recorded_and_the_rest_goes_on(tmp_path: Path) -> None:
    counter = tmp_path / "n"
    script = (f'n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}; '
              '[ "$n" -eq 2 ] && { echo "cannot reach the server"; echo; exit 3; }; '
              '[ "$n" -eq 4 ] && sleep 30; echo done')
    t0 = time.monotonic()
    proc = workload(["--compare", "default,default", "--rounds", "3", "--warmup", "0", "--timeout", "2",
                     "--json", "--", "sh", "-c", script], tmp_path)
    assert proc.returncode == ExitCode.FAILURE, proc.stderr
    assert time.monotonic() - t0 < 25  # the sleeping run was cut at its timeout
    runs = report_of(proc)["runs"]
    assert [r["status"] for r in runs] == ["ok", "ok", "failed", "ok", "timeout", "ok"]
    assert runs[2]["exit_status"] == 3
    assert runs[2]["error"] == "cannot reach the server"  # its last line, blank lines skipped
    assert describe_run(runs[2]) == "failed (exit status 3): cannot reach the server"  # the terminal's line
    assert [r["error"] for r in runs if r["status"] == "ok"] == [None] * 4
    assert 2 <= runs[4]["wall_s"] < 5
    assert report_of(proc)["results"]["wall_s"]["schedulers"]["default"]["summary"]["n"] == 2


@pytest.mark.parametrize("args,message", [
    (["--compare", "default,cfs", "--", "true"], "unknown scheduler 'cfs'"),
    (["--compare", "default,default", "--", "no-such-command-xyz"], "not found in PATH"),
    (["--compare", "default,default", "--metric", "x=never ([0-9]+)", "--", "echo", "hello"],
     "--metric x: no match in the command's output"),
    (["--compare", "default,default", "--user", "no-such-user-xyz", "--", "true"], "no such user"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    proc = workload(args, tmp_path, timeout=60)
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert message in lines[0] and all(ln.startswith("scxctl: ") for ln in lines), proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_as_another_user(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("--user needs root")
    keep = tmp_path / "out"
    proc = workload(["--compare", "default", "--rounds", "1", "--warmup", "0", "--json", "--user", "nobody",
                     "--keep-output", str(keep), "--", "id", "-u"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (keep / "round01-1-default.log").read_text().strip() == "65534"


def _pids_of(marker: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker in (d / "cmdline").read_bytes().decode(errors="replace"):
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def test_ctrl_c_stops_the_command_and_exits_130(tmp_path: Path) -> None:
    marker = f"31.{os.getpid()}"  # this run's own: another run's leftovers must not count
    p = subprocess.Popen([sys.executable, "-m", "scxctl", "bench", "workload", "--compare", "default",
                          "--warmup", "0", "--quiet", "--", "sh", "-c", f"sleep {marker}; sleep {marker}"],
                         env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=sigint_default)
    deadline = time.monotonic() + 30
    while not any(pid != p.pid for pid in _pids_of(f"sleep {marker}")) and time.monotonic() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == ExitCode.INTERRUPTED, err
    assert err.strip().splitlines()[-1] == "scxctl: error: interrupted"
    # the group was sent SIGKILL before the exit; its members still have to run to end
    deadline = time.monotonic() + 10  # the sleeps alone would last 62 s
    while _pids_of(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _pids_of(f"sleep {marker}") == []


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_ctrl_c_while_the_command_starts_still_kills_its_group(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C that lands inside Popen, after the fork, must not lose the command's pid."""
    real_popen = subprocess.Popen
    started: list[int] = []

    def popen_then_ctrl_c(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = real_popen(*args, **kwargs)
        started.append(proc.pid)
        signal.raise_signal(signal.SIGINT)  # before Popen has returned the pid to its caller
        return proc

    monkeypatch.setattr(workload_module.subprocess, "Popen", popen_then_ctrl_c)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job ignores it
    try:
        with (tmp_path / "out").open("wb") as out, pytest.raises(KeyboardInterrupt):
            workload_module.execute(["sh", "-c", "sleep 30; sleep 30"], out)
    finally:
        signal.signal(signal.SIGINT, old)
    assert len(started) == 1
    deadline = time.monotonic() + 10
    while not _group_gone(started[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _group_gone(started[0]), f"the command's group {started[0]} outlived the interrupt"


def test_a_default_run_beside_a_loaded_sched_ext_scheduler_is_invalid(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path / "root")
    fake.write("/sys/devices/system/cpu/online", "0-1\n")
    fake.write("/proc/sys/kernel/osrelease", "7.3.4+deb13-cloud-amd64\n")
    fake.write("/proc/loadavg", "0.50 0.40 0.30 2/300 12345\n")
    fake.write("/sys/kernel/sched_ext/state", "enabled\n")
    fake.write("/sys/kernel/sched_ext/root/ops", "simple\n")
    fake.write("/sys/kernel/sched_ext/enable_seq", "3\n")
    opts = WorkloadOptions(command=["true"], schedulers=parse_compare("default"), rounds=1, warmup=0)
    report = run_workload(opts, sysroot=fake.sysroot)
    jsonschema.validate(report, REPORT)
    (run,) = report["runs"]
    assert run["status"] == "invalid" and "(simple) was loaded before the run" in run["invalid_reason"]
    assert run["before"] == {"loadavg_1m": 0.5, "procs_running": 2, "sched_ext_state": "enabled",
                             "ops": "simple", "enable_seq": 3}
    assert report["exit_code"] == ExitCode.EJECTED
