"""harden(): memory locked once (a restart's second mlockall(MCL_CURRENT) only walks every page again),
transparent huge pages off for the process, on the real kernel too."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from scxctl.pyland import hardening


class _FakeLibc:
    def __init__(self, result: int) -> None:
        self.calls: list[int] = []
        self.prctls: list[tuple[int, ...]] = []
        self.result = result

    def mlockall(self, flags: int) -> int:
        self.calls.append(flags)
        return self.result

    def prctl(self, option: int, *args: int) -> int:
        self.prctls.append((option, *args))
        return 0


@pytest.fixture
def fake_libc(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def use(result: int) -> _FakeLibc:
        libc = _FakeLibc(result)
        monkeypatch.setattr(hardening.ctypes, "CDLL", lambda *_a, **_k: libc)
        return libc

    monkeypatch.setattr(hardening, "_locked", False)
    monkeypatch.setattr(hardening.resource, "setrlimit", lambda *_a: None)
    yield use
    gc.unfreeze()
    gc.enable()


def test_memory_is_locked_once_across_restarts(fake_libc: Any) -> None:
    libc = fake_libc(0)
    hardening.harden()
    hardening.harden()
    hardening.harden()
    assert libc.calls == [hardening.MCL_CURRENT | hardening.MCL_FUTURE]
    assert libc.prctls == [(hardening.PR_SET_THP_DISABLE, 1, 0, 0, 0)]
    assert not gc.isenabled()


def test_a_failed_lock_is_tried_again_at_the_next_attach(fake_libc: Any) -> None:
    libc = fake_libc(-1)
    hardening.harden()
    hardening.harden()
    assert len(libc.calls) == 2


def test_the_kernel_turns_transparent_huge_pages_off_for_the_process() -> None:
    """The prctl as harden() makes it, in a child process: /proc says THP is off for it after."""
    code = (
        "import ctypes; from scxctl.pyland import hardening\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.prctl(hardening.PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0, ctypes.get_errno()\n"
        "print(open('/proc/self/status').read())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "THP_enabled:\t0" in out, out
