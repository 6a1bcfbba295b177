"""The native bench worker on this host: its roles, its protocol, its errors, and that nothing of it
outlives scxctl. Real processes under the default scheduler; no sched_ext needed.

The timing cross-check against an independent implementation (tests/native/schtest_ref.c) is in
test_bench_vm.py, where both run in one guest boot, and in benchmarks/bench_vs_native.py here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scxctl.bench import worker
from scxctl.bench.env import Env
from scxctl.bpf import object as bpfobject
from scxctl.errors import ExitCode, ScxctlError, UsageError

ROOT = Path(__file__).resolve().parent.parent
CPUS = sorted(os.sched_getaffinity(0))
SHORT = ["--min-time", "0.1", "--max-time", "0.2"]


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    subprocess.run(["make", "-s", "-C", str(ROOT / "native")], check=True, capture_output=True)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _affinity(pid: int) -> set[int]:
    return os.sched_getaffinity(pid)


def _thread_names(pid: int) -> set[str]:
    return {(t / "comm").read_text().strip() for t in Path(f"/proc/{pid}/task").iterdir()}


def test_adaptive_roles_are_pinned_threads_and_rounds_return_samples() -> None:
    cpu = CPUS[-1]
    with worker.start("adaptive", [cpu], Env()) as w:
        assert set(w.roles) == {"slow-ctl", "fast-ctl"}
        for role, pid in w.roles.items():
            assert _affinity(pid) == {cpu}, role
        assert _thread_names(w.roles["slow-ctl"]) == {"scxbench-slow-c", "scxbench-slow-w"}
        assert _thread_names(w.roles["fast-ctl"]) == {"scxbench-fast-c", "scxbench-fast-w"}
        sems = w.round(30)
        assert set(sems) == {"fast", "slow"}
        for name, (kept, seen) in sems.items():
            # a wake-up is sampled only when the worker really slept: at most one per round trip
            assert len(kept) == seen <= 30, name
            assert all(0 < v < 1_000_000_000 for v in kept), name
        _, fast_seen = sems["fast"]
        assert fast_seen > 0  # the fast worker sleeps 9.9 ms each time: its controller waits for it
        again = w.round(5)
        assert again["fast"][1] <= 5  # the counts are per round, reset by the driver


def test_floor_keeps_a_reservoir_of_1024_per_semaphore() -> None:
    with worker.start("floor", [CPUS[0]], Env()) as w:
        sems = w.round(4000)
    assert set(sems) == {"ping", "pong"}
    for kept, seen in sems.values():
        assert len(kept) == min(seen, 1024) and seen <= 4000
    assert sum(seen for _, seen in sems.values()) > 1024  # enough round trips to fill a reservoir


def test_fairness_pins_one_spinner_per_cpu_and_floats_as_many() -> None:
    with worker.start("fairness", CPUS, Env()) as w:
        pinned = {r: p for r, p in w.roles.items() if r.startswith("pinned")}
        floating = {r: p for r, p in w.roles.items() if r.startswith("float")}
        assert sorted(pinned) == sorted(f"pinned{c}" for c in CPUS)
        assert len(floating) == len(CPUS)
        for role, pid in pinned.items():
            assert _affinity(pid) == {int(role[6:])}
        for pid in floating.values():
            assert _affinity(pid) == set(CPUS)
        ticks = []
        w.env.heartbeat = lambda: ticks.append(1)
        t0 = time.monotonic()
        w.round(400)  # each spinner spins 400 ms of wall-clock time
        assert time.monotonic() - t0 >= 0.39
        assert len(ticks) >= 2  # the progress/health tick runs while a round does


def test_a_bad_cpu_is_a_usage_error_and_leaves_nothing() -> None:
    before = _bench_tasks()
    with pytest.raises(UsageError, match=r"cannot pin the (slow|fast)-ctl process to CPU 1000"):
        worker.start("adaptive", [1000], Env())
    with pytest.raises(UsageError, match="not a CPU number: 4000"):
        worker.start("adaptive", [4000], Env())
    assert _bench_tasks() - before == set()


@pytest.mark.skipif(Path("/sys/kernel/sched_ext").exists(), reason="this kernel has SCHED_EXT")
def test_sched_ext_refused_by_the_kernel_is_one_clear_error() -> None:
    with pytest.raises(ScxctlError, match="cannot set SCHED_EXT on the ping process"):
        worker.start("floor", [CPUS[0]], Env(sched_ext=True))


def test_a_killed_role_ends_the_round_with_its_name() -> None:
    with worker.start("adaptive", [CPUS[0]], Env()) as w:
        os.kill(w.roles["slow-ctl"], signal.SIGKILL)
        with pytest.raises(ScxctlError, match="workload process slow-ctl was killed by signal 9"):
            w.round(1000)


def test_close_kills_the_driver_and_every_role() -> None:
    w = worker.start("fairness", CPUS, Env())
    pids = [w._proc.pid, *w.roles.values()]
    w.round(1)
    w.close()
    deadline = time.monotonic() + 5.0  # SIGKILL is delivered when each is next scheduled
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert alive == []


def test_the_worker_dies_with_a_sigkilled_scxctl() -> None:
    code = (
        "import sys, time\n"
        "from scxctl.bench import worker\n"
        "from scxctl.bench.env import Env\n"
        f"w = worker.start('fairness', {CPUS!r}, Env())\n"
        "print(w._proc.pid, *w.roles.values(), flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 1 + 2 * len(CPUS) and all(_alive(p) for p in pids)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if _alive(p)] == []


def test_an_unknown_request_is_refused() -> None:
    exe = worker.resolve()
    proc = subprocess.run([str(exe), "floor", str(CPUS[0])], input="bogus\n", capture_output=True,
                          text=True, timeout=10)
    assert proc.returncode == 2
    assert proc.stdout.splitlines()[-1] == "error usage unknown request: bogus"


def test_a_stale_worker_is_refused_with_the_rebuild_hint(tmp_path: Path) -> None:
    src = tmp_path / "native"
    shutil.copytree(ROOT / "native", src, ignore=shutil.ignore_patterns("build"))
    exe = ROOT / "native" / "build" / "scxctl-bench-worker"
    v = bpfobject.inspect([("checkout", exe)], bpf_dir=src, artifact=worker.WORKER)
    assert v.fresh is True
    with (src / "scxctl-bench-worker.c").open("a") as f:
        f.write("\n/* changed */\n")
    v = bpfobject.inspect([("checkout", exe)], bpf_dir=src, artifact=worker.WORKER)
    assert v.fresh is False
    with pytest.raises(ScxctlError) as e:
        bpfobject.resolve(verdict=v)
    assert e.value.code == ExitCode.BPF and "stale bench worker" in e.value.message
    assert "make -C native" in (e.value.hint or "")
    missing = bpfobject.inspect([("installed", tmp_path / "nope")], artifact=worker.WORKER)
    with pytest.raises(ScxctlError, match="bench worker not found"):
        bpfobject.resolve(verdict=missing)


def test_bench_refuses_a_file_that_is_no_worker_with_exit_7(tmp_path: Path) -> None:
    env = dict(os.environ, SCXCTL_BENCH_WORKER=str(tmp_path / "gone"), SCXCTL_DATA_DIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "scxctl", "bench", "adaptive-priority", *SHORT],
        env=env, capture_output=True, text=True, timeout=60,
    )
    # $SCXCTL_BENCH_WORKER names a missing file, so the checkout's worker is the one chosen and runs
    assert proc.returncode in (0, 1), proc.stderr
    env["SCXCTL_BENCH_WORKER"] = str(ROOT / "README.md")  # exists, so it is chosen: but no build metadata
    proc = subprocess.run(
        [sys.executable, "-m", "scxctl", "bench", "adaptive-priority", *SHORT],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 7, proc.stderr
    assert proc.stderr.startswith("scxctl: error: ") and "README.md" in proc.stderr
    assert "Traceback" not in proc.stderr


def _bench_tasks() -> set[int]:
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().startswith("scxbench-") and _alive(int(d.name)):
                    out.add(int(d.name))
            except OSError:
                continue
    return out
