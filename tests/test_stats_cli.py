"""`scxctl stats` against fake sysroots: pyland's snapshot live, stale or absent, the kernel's events
present or not, no scheduler, a scheduler that leaves between the two readings, and -f until Ctrl-C.

No daemon answers here (its view says so); tests/test_daemon_metrics.py reads one that does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_fakes import REPO
from fakeroot import FakeRoot
from interrupt import sigint_default
from typer.testing import CliRunner

from scxctl import paths
from scxctl.cli import app
from scxctl.daemon import stats as lib
from scxctl.errors import ExitCode
from scxctl.fsutil import atomic_write_text

EVENTS = "/sys/kernel/sched_ext/root/events"


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeRoot:
    root = FakeRoot(tmp_path / "root").sched_ext_machine(state="enabled", ops="pyland")
    monkeypatch.setenv("SCXCTL_SYSROOT", str(root.root))
    monkeypatch.setenv("SCXCTL_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    return root


def invoke(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["stats", *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout, res.stderr if hasattr(res, "stderr") else ""


def snapshot(pid: int | None = None, age_s: float = 0.0, scale: float = 0.0, **over: Any) -> dict[str, Any]:
    """A pyland snapshot; with `scale`, each counter is `scale` x its rate x the monotonic clock, so
    that two snapshots differ by exactly rate x their time apart."""
    t = time.monotonic() - age_s
    doc = {
        "schema": 1, "pid": pid or os.getpid(), "monotonic": t, "wall": time.time() - age_s,
        "interval_s": 0.1,
        "policy": "deadline", "mode": "steer", "restarts": 0,
        "bpf": {"nr_kthread": int(100 * t * scale) + 7, "nr_rescued": 2, "nr_enabled": 12,
                "nr_stalled": 0},
        "loop": {"consumed": int(1000 * t * scale) + 100, "observed": 50,
                 "written": int(500 * t * scale) + 80},
        "loop_cpu_s": 0.25 * t * scale + 1.5,
        "policy_stats": {"boosted": 3},
    }
    doc.update(over)
    return doc


def put(doc: dict[str, Any]) -> None:
    path = paths.pyland_stats_file()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


@pytest.fixture
def live_pyland(fake: FakeRoot, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """pyland's loop, as far as a reader sees it: a fresh snapshot every 0.1 s, events counting.

    Each reading sees one writer step whole, as the real sources, which never wait for each other,
    would show it over an interval: a reader that woke from a stall of the whole process together
    with the writer could otherwise read the new snapshot and the events from before it, while the
    writer's file writes let it run in between, and find that no event moved.
    """
    stop = threading.Event()
    step = threading.Lock()
    take = lib.take

    def write() -> None:
        n = 0
        while not stop.is_set():
            with step:
                put(snapshot(scale=1.0))
                # replaced whole, as the kernel's file reads: FakeRoot.write unlinks first, and a
                # reader between the unlink and the write found no events (per second: "-")
                events = f"SCX_EV_SELECT_CPU_FALLBACK {n}\nSCX_EV_DISPATCH_KEEP_LAST 3\n"
                atomic_write_text(fake.path(EVENTS), events)
            n += 10
            stop.wait(0.1)

    def whole_step(*args: Any, **kwargs: Any) -> lib.Sample:
        with step:
            return take(*args, **kwargs)

    monkeypatch.setattr(lib, "take", whole_step)

    put(snapshot(scale=1.0))
    fake.write(EVENTS, "SCX_EV_SELECT_CPU_FALLBACK 0\nSCX_EV_DISPATCH_KEEP_LAST 3\n")
    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


def test_no_scheduler_loaded_is_one_line_and_exit_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = FakeRoot(tmp_path / "root").sched_ext_machine(state="disabled")
    monkeypatch.setenv("SCXCTL_SYSROOT", str(root.root))
    monkeypatch.setenv("SCXCTL_RUNTIME_DIR", str(tmp_path / "run"))
    t0 = time.monotonic()
    code, out, _ = invoke("--interval", "5")
    assert (code, out) == (0, "no sched_ext scheduler is loaded (sched_ext disabled)\n")
    assert time.monotonic() - t0 < 4  # said at once, not after an interval
    code, out, _ = invoke("--json")
    doc = json.loads(out)
    assert code == 0 and doc["loaded"] is False and doc["pyland"] is None and doc["events"] is None


def test_a_kernel_without_sched_ext_exits_4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = FakeRoot(tmp_path / "root").no_sched_ext_machine()
    monkeypatch.setenv("SCXCTL_SYSROOT", str(root.root))
    code, _, _ = invoke()
    assert code == ExitCode.UNSUPPORTED == 4


def test_interval_must_be_positive(fake: FakeRoot) -> None:
    code, _, _ = invoke("--interval", "0")
    assert code == ExitCode.USAGE


@pytest.mark.usefixtures("live_pyland")
def test_live_pyland_totals_and_rates_with_the_kernels_events() -> None:
    code, out, _ = invoke("--json", "--interval", "0.3")
    assert code == 0
    doc = json.loads(out)
    p = doc["pyland"]
    assert doc["scheduler"] == "pyland" and doc["exited"] is False and p["live"] is True
    assert (p["policy"], p["mode"], p["policy_stats"]) == ("deadline", "steer", {"boosted": 3})
    assert p["total"]["records"] >= 150 and p["total"]["placed_in_bpf"] >= 7 and p["total"]["rescues"] == 2
    rates = p["per_s"]
    assert 900 <= rates["records"] <= 1100 and 450 <= rates["decisions"] <= 550
    assert 90 <= rates["placed_in_bpf"] <= 110 and rates["rescues"] == 0
    assert 0.2 <= rates["loop_cpu_s"] <= 0.3
    ev = doc["events"]
    assert ev["total"]["SCX_EV_DISPATCH_KEEP_LAST"] == 3 and ev["per_s"]["SCX_EV_DISPATCH_KEEP_LAST"] == 0
    assert ev["per_s"]["SCX_EV_SELECT_CPU_FALLBACK"] > 0
    assert doc["daemon"]["running"] is False and doc["daemon"]["error"].startswith("no daemon")
    assert 0.3 <= doc["interval_s"] < 2.5


@pytest.mark.usefixtures("live_pyland")
def test_the_text_view_shows_per_second_and_total() -> None:
    code, out, _ = invoke("--interval", "0.3")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "scheduler:  pyland (sched_ext enabled)"
    assert lines[1].startswith("daemon:     no daemon (no scxctl daemon answers on ")
    assert lines[2] == f"pyland:     pid {os.getpid()}, policy deadline, steer mode, restarts 0"
    rescues = next(ln for ln in lines if ln.strip().startswith("rescues"))
    assert rescues.split() == ["rescues", "0", "2"]
    assert next(ln for ln in lines if "loop CPU" in ln).endswith(" s") and "%" in out
    assert next(ln for ln in lines if "process CPU (all threads)" in ln).endswith(" s")
    assert "kernel events:" in out
    assert next(ln for ln in lines if "dispatch_keep_last" in ln).split() == ["dispatch_keep_last", "0", "3"]


def test_no_snapshot_and_no_events_file(fake: FakeRoot) -> None:
    code, out, _ = invoke("--interval", "0.05")
    assert code == 0
    assert "pyland:     no counters published" in out
    assert "kernel events: not reported by this kernel" in out
    code, out, _ = invoke("--json", "--interval", "0.05")
    doc = json.loads(out)
    assert doc["pyland"] is None and doc["events"] is None and doc["loaded"] is True


def test_another_schedulers_events_and_no_pyland_numbers(fake: FakeRoot) -> None:
    fake.sched_ext_sysfs(state="enabled", ops="simple")
    fake.write(EVENTS, "SCX_EV_BYPASS_DURATION 1200\nnot a counter line\n")
    put(snapshot())  # a leftover from a pyland that ran before: not this scheduler's
    code, out, _ = invoke("--json", "--interval", "0.05")
    doc = json.loads(out)
    assert code == 0 and doc["scheduler"] == "simple" and doc["pyland"] is None
    assert doc["events"]["total"] == {"SCX_EV_BYPASS_DURATION": 1200}


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("why", ["pid gone", "old"])
def test_a_stale_snapshot_is_reported_as_stale_not_live(fake: FakeRoot, why: str) -> None:
    doc_pid = dead_pid() if why == "pid gone" else os.getpid()
    put(snapshot(pid=doc_pid) if why == "pid gone" else snapshot(age_s=30))
    code, out, _ = invoke("--interval", "0.05")
    assert code == 0
    (line,) = [ln for ln in out.splitlines() if ln.startswith("pyland:")]
    assert line.startswith(f"pyland:     counters of pid {doc_pid} stale: ")
    assert line.endswith("its process is gone (not shown as live)" if why == "pid gone"
                         else "written 30 s ago (not shown as live)")
    assert "records" not in out
    doc = json.loads(invoke("--json", "--interval", "0.05")[1])
    assert doc["pyland"]["live"] is False and doc["pyland"]["per_s"] is None


def test_a_scheduler_that_exits_between_the_readings(fake: FakeRoot) -> None:
    put(snapshot())
    fake.write(EVENTS, "SCX_EV_SELECT_CPU_FALLBACK 5\n")

    def leave() -> None:
        time.sleep(0.15)
        paths.pyland_stats_file().unlink()
        fake.remove("/sys/kernel/sched_ext/root")
        fake.write("/sys/kernel/sched_ext/state", "disabled\n")

    thread = threading.Thread(target=leave)
    thread.start()
    code, out, _ = invoke("--interval", "0.5")
    thread.join()
    assert code == 0
    first = out.splitlines()[0]
    assert first == "scheduler:  pyland exited during the interval; now none (sched_ext disabled)"
    assert "Traceback" not in out


def sample(ops: str | None, seq: int, events: dict[str, int] | None, at: float) -> lib.Sample:
    from scxctl.sysfs import SchedExtStatus

    kernel = SchedExtStatus(True, "enabled" if ops else "disabled", ops, False, 0, seq)
    return lib.Sample(at, at, kernel, events, None, None, None, "not asked")


def test_rates_only_between_readings_of_one_scheduler() -> None:
    a = sample("simple", 3, {"SCX_EV_X": 10}, 100.0)
    same = lib.document(a, sample("simple", 3, {"SCX_EV_X": 30}, 102.0))
    assert same["events"]["per_s"] == {"SCX_EV_X": 10.0} and same["exited"] is False
    again = lib.document(a, sample("simple", 4, {"SCX_EV_X": 2}, 102.0))  # loaded again meanwhile
    assert again["exited"] is True and again["previous"] == "simple" and again["events"]["per_s"] is None
    gone = lib.document(a, sample(None, 4, None, 102.0))
    assert gone["exited"] is True and gone["loaded"] is False and gone["events"] is None


def spawn(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "scxctl", "stats", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)


@pytest.mark.usefixtures("live_pyland")
def test_follow_json_is_one_document_per_interval_until_ctrl_c() -> None:
    proc = spawn(dict(os.environ), "-f", "--json", "--interval", "0.2")
    assert proc.stdout is not None
    docs = [json.loads(proc.stdout.readline()) for _ in range(3)]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err
    assert docs[0]["pyland"]["per_s"] is None  # one reading: no rate yet
    assert all(d["pyland"]["live"] for d in docs)
    assert docs[2]["pyland"]["per_s"]["records"] > 0 and docs[2]["interval_s"] >= 0.2


def test_follow_redraws_until_ctrl_c_and_exits_0(fake: FakeRoot) -> None:
    proc = spawn({**os.environ, "FORCE_COLOR": "1", "COLUMNS": "120"}, "-f", "--interval", "0.1")
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "scheduler:" in out and "pyland" in out
