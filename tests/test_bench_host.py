"""`scxctl bench` end to end on this host: real pinned processes, the default scheduler, short times.

Also drives the scheduler lifecycle (start, BUSY, ejection -> INVALID, stop, Ctrl-C) with a fake
scx_* binary that plays the kernel's part in a fake /sys/kernel/sched_ext (SCXCTL_SYSROOT), while
/proc and the CPU topology stay real (symlinks), so the workloads are real processes.
Never asserts whether the default scheduler passes or fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from interrupt import sigint_default

from scxctl.bench.schema import REPORT

MIN_T, MAX_T = 0.3, 0.6
SHORT = ["--min-time", str(MIN_T), "--max-time", str(MAX_T)]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["SCXCTL_DATA_DIR"] = str(tmp / "data")
    env.pop("SCXCTL_SYSROOT", None)
    env.update(extra)
    return env


def scxctl(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scxctl", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def bench_processes() -> list[int]:
    """PIDs of every live workload process (their comm starts with scxbench-)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                comm = (d / "comm").read_text().strip()
                state = (d / "stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if comm.startswith("scxbench-") and state != "Z":
                found.append(int(d.name))
    return found


def descendants(pid: int) -> set[int]:
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for k in kids:
                if int(k) not in out:
                    out.add(int(k))
                    todo.append(int(k))
    return out


def thread_names(pids: set[int]) -> set[str]:
    """The task names of every thread of `pids` (a worker names its threads by role)."""
    out = set()
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            with contextlib.suppress(OSError):
                out.add((task / "comm").read_text().strip())
    return out


def comms(pids: set[int]) -> dict[int, str]:
    """The task name of each live process of `pids`."""
    out = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            if alive(pid):
                out[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


# --- one real run of both tests under the default scheduler ---------------------------------------


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("bench")
    out_file = tmp / "report.json"
    before = set(bench_processes())
    proc = scxctl(["bench", "all", "--json", "--output", str(out_file), *SHORT], _env(tmp))
    return {
        "proc": proc,
        "report": json.loads(proc.stdout),
        "file": out_file,
        "data": tmp / "data",
        "leftover": set(bench_processes()) - before,
    }


def test_run_exits_with_a_verdict_code(full_run: dict[str, Any]) -> None:
    assert full_run["proc"].returncode in (0, 1), full_run["proc"].stderr
    assert "Traceback" not in full_run["proc"].stderr
    statuses = [t["status"] for r in full_run["report"]["runs"] for t in r["tests"]]
    assert (full_run["proc"].returncode == 0) == all(s == "pass" for s in statuses)


def test_json_validates_and_is_persisted(full_run: dict[str, Any]) -> None:
    report = full_run["report"]
    jsonschema.validate(report, REPORT)
    assert json.loads(full_run["file"].read_text()) == report
    saved = list((full_run["data"] / "bench").glob("*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text()) == report
    assert report["machine"]["kernel"] == os.uname().release
    assert report["machine"]["cpus_online"] == len(report["machine"]["online_cpus"]) >= 1
    assert [t["test"] for t in report["runs"][0]["tests"]] == ["adaptive_priority", "fairness"]


def _test(full_run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in full_run["report"]["runs"][0]["tests"] if t["test"] == name)


def test_convergence_follows_schtest(full_run: dict[str, Any]) -> None:
    for name in ("adaptive_priority", "fairness"):
        ms = _test(full_run, name)["measurements"]
        assert ms[0]["iters"] == 1
        for m in ms:
            # elapsed_s is rounded to 0.1 ms in the report; counted was decided on the exact value.
            if abs(m["elapsed_s"] - MIN_T) > 1e-4:
                assert m["counted"] == (m["elapsed_s"] >= MIN_T), m
        assert ms[-1]["elapsed_s"] >= MAX_T - 1e-4 and all(m["elapsed_s"] <= MAX_T for m in ms[:-1])
        assert _test(full_run, name)["final"] == ms[-1]
        assert _test(full_run, name)["metric"] == ms[-1]["metric"]


def test_adaptive_priority_latencies_are_sane(full_run: dict[str, Any]) -> None:
    t = _test(full_run, "adaptive_priority")
    assert t["cpu"] == 0 or t["cpu"] in full_run["report"]["machine"]["online_cpus"]
    for m in t["measurements"]:
        for side in ("fast", "slow"):
            lat = m[side]
            assert lat["count"] >= lat["retained"] >= 0
            if lat["count"]:
                for q in ("p50_ns", "p90_ns", "p99_ns", "min_ns", "max_ns"):
                    assert 0 < lat[q] < m["elapsed_s"] * 1e9, (side, q, lat)
                assert lat["p50_ns"] <= lat["p90_ns"] <= lat["p99_ns"]
                assert sum(lat["histogram"]) == lat["retained"]
        assert m["unreliable"] == (min(m["fast"]["count"], m["slow"]["count"]) < 20)
        if m["metric"] is not None:
            # the report rounds the metric to 4 decimals (converge.py), the percentiles less coarsely
            assert m["metric"] == pytest.approx(m["fast"]["p90_ns"] / m["slow"]["p90_ns"], rel=1e-3, abs=5e-5)
    # The fast worker sleeps 9.9 ms every round trip, so a run samples it. One short measurement
    # may not: on a loaded host the controller can post before the worker is back in FUTEX_WAIT,
    # and a wake-up that did not sleep is not sampled (schtest's rule); the report flags that.
    assert sum(m["fast"]["count"] for m in t["measurements"]) > 0
    assert t["unreliable"] == (t["status"] == "unreliable")


def test_fairness_is_in_range(full_run: dict[str, Any]) -> None:
    t = _test(full_run, "fairness")
    n = full_run["report"]["machine"]["cpus_online"]
    final = t["final"]
    assert 0 < t["metric"] <= 1.2
    spread = final["cpu_time_s"]
    assert 0 < spread["min"] <= spread["p10"] <= spread["mean"] <= spread["max"]
    procs = final["processes"]
    assert len(procs) == 2 * n
    assert sorted(p["pinned_cpu"] for p in procs if p["pinned_cpu"] is not None) == sorted(
        full_run["report"]["machine"]["online_cpus"]
    )
    # CPU time cannot exceed the wall time of all rounds run so far
    total_wall = sum(m["elapsed_s"] for m in t["measurements"])
    assert all(p["cpu_time_s"] <= total_wall + 0.05 for p in procs)


def test_harness_overhead_is_reported(full_run: dict[str, Any]) -> None:
    for name in ("adaptive_priority", "fairness"):
        o = _test(full_run, name)["overhead"]
        w = o["wake"]
        assert o["round_trips"] > 0 and w["count"] > 0
        assert 0 < w["p50_ns"] <= w["p90_ns"] < 0.1e9


def test_no_workload_survives_a_run(full_run: dict[str, Any]) -> None:
    assert full_run["leftover"] == set()


def test_human_output_has_table_and_distributions(tmp_path: Path) -> None:
    proc = scxctl(["bench", "adaptive-priority", *SHORT], _env(tmp_path))
    assert proc.returncode in (0, 1), proc.stderr
    for needle in ("adaptive_priority (pass if metric < 0.50)", "fast wake p50/p90/p99", "harness floor"):
        assert needle in proc.stdout
    assert any(ch in proc.stdout for ch in "▁▂▃▄▅▆▇█")  # sparklines of the distributions
    assert "converge: iters=1," in proc.stderr  # every measurement is reported


def test_quiet_prints_one_line_per_test(tmp_path: Path) -> None:
    proc = scxctl(["bench", "fairness", "--quiet", *SHORT], _env(tmp_path))
    assert proc.returncode in (0, 1), proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fairness default: ") and "metric=" in lines[0]


# --- Ctrl-C --------------------------------------------------------------------------------------------


def _wait_for(cond: Any, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def test_sigint_stops_every_child(tmp_path: Path) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "scxctl", "bench", "all", "--min-time", "5", "--max-time", "10"],
        env=_env(tmp_path),
        preexec_fn=sigint_default,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # adaptive_priority's four workload threads; a role names itself only once it is pinned and has
    # its parent-death signal, so seeing every name means the Ctrl-C below lands on a fully started
    # workload rather than on one still being forked
    roles = {"scxbench-slow-c", "scxbench-slow-w", "scxbench-fast-c", "scxbench-fast-w"}
    try:
        _wait_for(lambda: roles <= thread_names(descendants(p.pid)))
        kids = descendants(p.pid)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130
    assert err.strip().endswith("scxctl: error: interrupted") and "Traceback" not in err
    assert [k for k in kids if alive(k)] == []


# --- bad input -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["adaptive-priority", "--cpu", "999"], 2, "CPU 999 does not exist"),
        (["fairness", "--min-time", "3", "--max-time", "1"], 2, "greater than --max-time"),
        (["all", "--scheduler", "bogus"], 2, "unknown scheduler 'bogus'"),
        (["all", "--scheduler", "/nonexistent/scx_x"], 2, "does not exist"),
        (["all", "--compare", "default"], 2, "at least two"),
    ],
)
def test_bad_input_is_one_line_and_a_code(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    before = set(bench_processes())
    proc = scxctl(["bench", *args], _env(tmp_path))
    assert proc.returncode == code
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("scxctl: error: ")
    assert set(bench_processes()) - before == set()


def test_cpu_outside_affinity_is_refused(tmp_path: Path) -> None:
    online = sorted(os.sched_getaffinity(0))
    if len(online) < 2:
        pytest.skip("needs two CPUs to restrict the affinity to one of them")
    proc = subprocess.run(
        [
            "taskset",
            "-c",
            str(online[1]),
            sys.executable,
            "-m",
            "scxctl",
            "bench",
            "adaptive-priority",
            "--cpu",
            str(online[0]),
            *SHORT,
        ],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "outside this process's CPU affinity" in proc.stderr


def test_starting_a_scheduler_without_sched_ext_is_unsupported(tmp_path: Path) -> None:
    fake = tmp_path / "root"
    fake.mkdir()
    (fake / "proc").symlink_to("/proc")
    (fake / "sys/devices").mkdir(parents=True)
    (fake / "sys/devices/system").symlink_to("/sys/devices/system")
    proc = scxctl(
        ["bench", "fairness", "--scheduler", "pyland", *SHORT], _env(tmp_path, SCXCTL_SYSROOT=str(fake))
    )
    assert proc.returncode == 4 and "no sched_ext" in proc.stderr


# --- a fake scheduler in a fake /sys/kernel/sched_ext ----------------------------------------------------

FAKE_SCX = r'''#!{python}
"""Plays a sched_ext scheduler: writes the sysfs files the kernel would, per the mode in argv."""
import os, signal, sys, time
d = os.path.join(os.environ["SCXCTL_SYSROOT"], "sys/kernel/sched_ext")
mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
def w(name, value):
    with open(os.path.join(d, name), "w") as f:
        f.write(value + "\n")
def unload(*_):
    w("state", "disabled")
    try:
        os.unlink(os.path.join(d, "root/ops"))
    except FileNotFoundError:
        pass
    sys.exit(0)
with open(os.path.join(os.environ["FAKE_PIDFILE"]), "w") as f:
    f.write(str(os.getpid()))
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, unload)
if mode == "crash":
    print("fake: verifier rejected the program", flush=True)
    sys.exit(7)
seq = int(open(os.path.join(d, "enable_seq")).read()) + 1
os.makedirs(os.path.join(d, "root"), exist_ok=True)
w("root/ops", "fake")
if mode == "late_seq":  # as the kernel does it: state and ops first, enable_seq a moment later
    w("switch_all", "1")
    w("state", "enabled")
    time.sleep(0.5)
w("enable_seq", str(seq))
w("switch_all", "1")
w("state", "enabled")
if mode == "eject":
    time.sleep(float(sys.argv[2]))
    w("state", "disabled")
    os.unlink(os.path.join(d, "root/ops"))
while True:
    time.sleep(1)
'''


@pytest.fixture
def fake_kernel(tmp_path: Path) -> Iterator[dict[str, Any]]:
    root = tmp_path / "root"
    sx = root / "sys/kernel/sched_ext"
    sx.mkdir(parents=True)
    for name, value in {
        "state": "disabled",
        "switch_all": "0",
        "nr_rejected": "0",
        "enable_seq": "0",
    }.items():
        (sx / name).write_text(value + "\n")
    (root / "proc").symlink_to("/proc")
    (root / "sys/devices").mkdir()
    (root / "sys/devices/system").symlink_to("/sys/devices/system")
    binary = tmp_path / "scx_fake"
    binary.write_text(FAKE_SCX.replace("{python}", sys.executable))
    binary.chmod(0o755)
    pidfile = tmp_path / "fake.pid"
    env = _env(tmp_path, SCXCTL_SYSROOT=str(root), FAKE_PIDFILE=str(pidfile))
    info = {"root": root, "sx": sx, "binary": str(binary), "env": env, "pidfile": pidfile}
    yield info
    if pidfile.exists():
        pid = int(pidfile.read_text())
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def _fake_pid(fk: dict[str, Any]) -> int:
    return int(fk["pidfile"].read_text())


def test_ejected_scheduler_marks_the_run_invalid(fake_kernel: dict[str, Any]) -> None:
    before = set(bench_processes())
    proc = scxctl(
        ["bench", "all", "--json", "--scheduler", fake_kernel["binary"], *SHORT, "--", "eject", "0.8"],
        fake_kernel["env"],
    )
    assert proc.returncode == 8, proc.stderr
    report = json.loads(proc.stdout)
    jsonschema.validate(report, REPORT)
    run = report["runs"][0]
    assert run["valid"] is False and "ejected" in run["invalid_reason"]
    assert run["scheduler"]["ops"] == "fake" and run["scheduler"]["enable_seq"] == 1
    assert run["tests"][-1]["status"] == "invalid"
    assert len(run["tests"]) == 1  # fairness was not run under a scheduler that is gone
    assert not alive(_fake_pid(fake_kernel))
    assert set(bench_processes()) - before == set()


def test_started_scheduler_is_stopped_after_a_valid_run(fake_kernel: dict[str, Any]) -> None:
    proc = scxctl(
        ["bench", "fairness", "--json", "--scheduler", fake_kernel["binary"], *SHORT], fake_kernel["env"]
    )
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    assert report["runs"][0]["valid"] is True
    assert report["runs"][0]["scheduler"]["command"] == [fake_kernel["binary"]]
    assert not alive(_fake_pid(fake_kernel))
    assert (fake_kernel["sx"] / "state").read_text().strip() == "disabled"


def test_enable_seq_bumped_after_the_state_is_not_a_re_attach(fake_kernel: dict[str, Any]) -> None:
    proc = scxctl(["bench", "fairness", "--json", "--scheduler", fake_kernel["binary"], *SHORT, "--",
                   "late_seq"], fake_kernel["env"])
    assert proc.returncode in (0, 1), proc.stderr
    run = json.loads(proc.stdout)["runs"][0]
    assert run["valid"] is True, run["invalid_reason"]
    assert run["scheduler"]["enable_seq"] == 1


def test_busy_when_another_scheduler_is_loaded(fake_kernel: dict[str, Any]) -> None:
    (fake_kernel["sx"] / "state").write_text("enabled\n")
    (fake_kernel["sx"] / "root").mkdir()
    (fake_kernel["sx"] / "root/ops").write_text("rustland\n")
    proc = scxctl(
        ["bench", "all", "--compare", f"default,{fake_kernel['binary']}", *SHORT], fake_kernel["env"]
    )
    assert proc.returncode == 5
    assert "another sched_ext scheduler is loaded (rustland" in proc.stderr
    assert not fake_kernel["pidfile"].exists()  # nothing was started


def test_scheduler_that_dies_at_start_is_reported(fake_kernel: dict[str, Any]) -> None:
    proc = scxctl(
        ["bench", "fairness", "--scheduler", fake_kernel["binary"], *SHORT, "--", "crash"], fake_kernel["env"]
    )
    assert proc.returncode == 1
    assert "exited (status 7) before it was enabled" in proc.stderr
    assert "verifier rejected" in proc.stderr


def test_sigint_unloads_the_scheduler_the_bench_started(fake_kernel: dict[str, Any]) -> None:
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scxctl",
            "bench",
            "fairness",
            "--scheduler",
            fake_kernel["binary"],
            "--min-time",
            "5",
            "--max-time",
            "10",
        ],
        env=fake_kernel["env"],
        preexec_fn=sigint_default,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: len([k for k in descendants(p.pid) if alive(k)]) >= 5)  # scheduler + 4 spinners
        kids = descendants(p.pid)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130
    assert [k for k in kids if alive(k)] == []
    assert (fake_kernel["sx"] / "state").read_text().strip() == "disabled"


def test_scheduler_ignoring_sigterm_is_killed(
    fake_kernel: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from scxctl.bench.scheduler import RunningScheduler, parse_scheduler
    from scxctl.sysfs import SysRoot

    for k, v in fake_kernel["env"].items():
        monkeypatch.setenv(k, v)
    sched = RunningScheduler(
        parse_scheduler(fake_kernel["binary"], ["stubborn"]), SysRoot(fake_kernel["root"])
    )
    sched.start()
    pid = _fake_pid(fake_kernel)
    assert sched.facts()["ops"] == "fake"
    sched.check()  # healthy
    t0 = time.monotonic()
    sched.stop(timeout_s=0.5)
    assert not alive(pid) and time.monotonic() - t0 < 5


def test_a_launcher_whose_name_is_not_its_ops_is_told_how_to_name_them(
    fake_kernel: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A wrapper script named `launch` that loads ops `fake`: the start times out, and the error
    says what did load and how to make the comparison expect it."""
    from scxctl.bench.scheduler import RunningScheduler, parse_scheduler
    from scxctl.errors import ScxctlError
    from scxctl.sysfs import SysRoot

    for k, v in fake_kernel["env"].items():
        monkeypatch.setenv(k, v)
    launch = tmp_path / "launch"
    launch.write_bytes(Path(fake_kernel["binary"]).read_bytes())
    launch.chmod(0o755)
    sched = RunningScheduler(parse_scheduler(str(launch)), SysRoot(fake_kernel["root"]), start_timeout_s=1.0)
    try:
        with pytest.raises(ScxctlError) as err:
            sched.start()
    finally:
        sched.stop(timeout_s=2)
    msg = str(err.value)
    assert "was not enabled as 'launch'" in msg and "ops fake" in msg, msg
    assert "(scx_NAME) unless --ops-name says 'fake'" in msg, msg
