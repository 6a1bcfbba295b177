"""benchmarks/vm_sched_compare.py outside the usual layout: a checkout whose neighbour holds no schbench
source (a worktree elsewhere) gets a one-line usage error before anything is built, or the binary
already built, never gcc's failure as a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import vm_sched_compare


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(vm_sched_compare, "PEER", tmp_path / "no-such" / "schbench.c")
    monkeypatch.setattr(vm_sched_compare, "cache_dir", lambda: tmp_path / "cache")
    return tmp_path


def test_no_source_and_no_binary_is_a_usage_error(
    elsewhere: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_build() -> None:
        raise AssertionError("scx_simple built before the usage error")

    monkeypatch.setattr(vm_sched_compare.anchors, "build", no_build)
    with pytest.raises(SystemExit) as exc:
        vm_sched_compare.main(["--loads", "hackbench"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "schbench source" in err and "--schbench PATH" in err
    assert "Traceback" not in err


def test_no_source_uses_the_binary_already_built(elsewhere: Path) -> None:
    built = elsewhere / "cache" / "peer" / "schbench"
    built.parent.mkdir(parents=True)
    built.write_bytes(b"\x7fELF")
    assert vm_sched_compare.schbench_binary(None) == built


def test_a_given_binary_wins(elsewhere: Path) -> None:
    given = elsewhere / "mine"
    assert vm_sched_compare.schbench_binary(given) == given
