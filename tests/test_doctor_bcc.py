"""The doctor's bcc check: module, headers for the running kernel, and when the trial compile runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakeroot import FakeRoot, context

from scxctl.doctor import checks_bcc as cb
from scxctl.doctor.model import Status
from scxctl.errors import ScxctlError
from scxctl.trace import deps


@pytest.fixture
def fake(tmp_path: Path) -> FakeRoot:
    return FakeRoot(tmp_path).sched_ext_machine()


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts trial compiles instead of running bcc (none of the host tests has bcc and headers)."""
    calls: list[int] = []
    monkeypatch.setattr(cb, "trial_compile", lambda: calls.append(1))
    monkeypatch.delenv("BCC_KERNEL_SOURCE", raising=False)
    return calls


def _headers(fake: FakeRoot) -> None:
    rel = fake.sysroot.kernel_release()
    (fake.path(f"/usr/src/linux-headers-{rel}") / "include").mkdir(parents=True)
    fake.path(f"/lib/modules/{rel}").mkdir(parents=True, exist_ok=True)
    fake.path(f"/lib/modules/{rel}/build").symlink_to(fake.path(f"/usr/src/linux-headers-{rel}"))


def test_no_bcc_warns_with_the_install_line(fake: FakeRoot, compiles: list[int],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "bcc_importable", lambda: False)
    r = cb.bcc(context(fake))
    rel = fake.sysroot.kernel_release()
    assert r.status is Status.WARN
    assert r.hint == f"apt install python3-bpfcc linux-headers-{rel}"
    assert compiles == []


def test_no_headers_warns_and_does_not_compile(fake: FakeRoot, compiles: list[int],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "bcc_importable", lambda: True)
    r = cb.bcc(context(fake))
    rel = fake.sysroot.kernel_release()
    assert r.status is Status.WARN
    assert (r.hint or "").startswith(f"apt install linux-headers-{rel}")
    assert r.details["reason"] == "no headers"
    assert compiles == []


def test_dangling_build_link_is_no_headers(fake: FakeRoot, compiles: list[int],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "bcc_importable", lambda: True)
    rel = fake.sysroot.kernel_release()
    fake.path(f"/lib/modules/{rel}").mkdir(parents=True, exist_ok=True)
    fake.path(f"/lib/modules/{rel}/build").symlink_to(fake.path("/usr/src/gone"))
    assert cb.bcc(context(fake)).details["reason"] == "no headers"


def test_headers_and_root_compile_once(fake: FakeRoot, compiles: list[int],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "bcc_importable", lambda: True)
    _headers(fake)
    r = cb.bcc(context(fake))
    assert (r.status, r.details["compiled"]) == (Status.OK, True)
    assert compiles == [1]


def test_not_root_skips_the_compile(fake: FakeRoot, compiles: list[int],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "bcc_importable", lambda: True)
    _headers(fake)
    r = cb.bcc(context(fake, euid=lambda: 1000))
    assert (r.status, r.details["compiled"], r.details["reason"]) == (Status.OK, False, "not root")
    assert compiles == []


def test_failed_compile_warns_with_the_reason(fake: FakeRoot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "bcc_importable", lambda: True)
    monkeypatch.delenv("BCC_KERNEL_SOURCE", raising=False)
    _headers(fake)

    def refuse() -> None:
        raise ScxctlError("bcc could not compile or load the wake-up tracer: fs.h:1: error: boom")

    monkeypatch.setattr(cb, "trial_compile", refuse)
    r = cb.bcc(context(fake))
    assert r.status is Status.WARN
    assert "error: boom" in r.finding
    assert r.details["compiled"] is False
