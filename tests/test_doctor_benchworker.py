"""doctor's bench.worker row: which worker `scxctl bench` would run, is it fresh, does it start.

Real files: the worker `make -C native` built, a copy of native/ to make it stale, and files that
are no worker. A broken worker only stops the bench, so the row warns and never fails.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from fakeroot import FakeRoot, context

from scxctl.bench import worker
from scxctl.bpf import object as bpfobject
from scxctl.doctor import checks_benchworker
from scxctl.doctor.model import Status

ROOT = Path(__file__).resolve().parent.parent
BUILT = ROOT / "native" / "build" / "scxctl-bench-worker"


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    subprocess.run(["make", "-s", "-C", str(ROOT / "native")], check=True, capture_output=True)


def _row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, candidates: list[tuple[str, Path]],
         sources: Path | None) -> checks_benchworker.CheckResult:
    src = sources if sources is not None else tmp_path / "no-sources"
    verdict = bpfobject.inspect(candidates, bpf_dir=src, artifact=worker.WORKER)
    monkeypatch.setattr(worker, "inspect", lambda: verdict)
    return checks_benchworker.bench_worker(context(FakeRoot(tmp_path / "root")))


def test_fresh_worker_that_starts_is_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = _row(tmp_path, monkeypatch, [("checkout", BUILT)], ROOT / "native")
    assert r.status is Status.OK and "matches the native/ sources; it starts" in r.finding
    assert r.details["chosen"] == str(BUILT) and r.details["fresh"] is True


def test_missing_worker_warns_with_the_build_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = _row(tmp_path, monkeypatch, [("installed", tmp_path / "gone")], None)
    assert r.status is Status.WARN and "scxctl bench cannot run: no worker" in r.finding
    assert "make -C native" in (r.hint or "")


def test_stale_worker_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "native"
    shutil.copytree(ROOT / "native", src, ignore=shutil.ignore_patterns("build"))
    (src / "scxctl-bench-worker.c").write_text((src / "scxctl-bench-worker.c").read_text() + "\n")
    r = _row(tmp_path, monkeypatch, [("checkout", BUILT)], src)
    assert r.status is Status.WARN and "is stale: built from sources" in r.finding
    assert r.hint == "rebuild with: make -C native"


def test_a_worker_that_does_not_start_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a copy of the real worker, so its build metadata reads, but not executable
    copy = tmp_path / "scxctl-bench-worker"
    shutil.copy(BUILT, copy)
    copy.chmod(0o644)
    r = _row(tmp_path, monkeypatch, [("installed", copy)], None)
    assert r.status is Status.WARN and "does not start: Permission denied" in r.finding, r.finding


def test_a_file_that_is_no_worker_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bogus = tmp_path / "worker.txt"
    bogus.write_text("not an ELF file\n")
    r = _row(tmp_path, monkeypatch, [("$SCXCTL_BENCH_WORKER", bogus)], None)
    assert r.status is Status.WARN and "not a 64-bit little-endian ELF file" in r.finding
