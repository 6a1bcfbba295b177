"""harden() locks memory once: a restart's second mlockall(MCL_CURRENT) only walks every page again."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from scxctl.pyland import hardening


class _FakeLibc:
    def __init__(self, result: int) -> None:
        self.calls: list[int] = []
        self.result = result

    def mlockall(self, flags: int) -> int:
        self.calls.append(flags)
        return self.result


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
    assert not gc.isenabled()


def test_a_failed_lock_is_tried_again_at_the_next_attach(fake_libc: Any) -> None:
    libc = fake_libc(-1)
    hardening.harden()
    hardening.harden()
    assert len(libc.calls) == 2
