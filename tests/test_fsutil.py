"""scxctl.fsutil: atomic writes leave either the old or the new content, and no temp files."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from scxctl import fsutil


def test_creates_parents_and_writes(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "state.json"
    fsutil.atomic_write_text(target, '{"x": 1}\n')
    assert target.read_text() == '{"x": 1}\n'
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_replaces_and_sets_mode(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("old")
    inode = target.stat().st_ino
    fsutil.atomic_write_bytes(target, b"new", mode=0o600)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.stat().st_ino != inode  # a new file was renamed over the old one
    assert os.listdir(tmp_path) == ["f"]


@pytest.mark.parametrize(("writer", "failing"), [
    (fsutil.atomic_write_bytes, "fsync"), (fsutil.atomic_write_bytes, "replace"),
    (fsutil.replace_volatile, "write"), (fsutil.replace_volatile, "replace"),
], ids=["atomic-fsync", "atomic-replace", "volatile-write", "volatile-replace"])
def test_failure_keeps_old_content_and_removes_the_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: Callable[[Path, bytes], None], failing: str
) -> None:
    target = tmp_path / "f"
    target.write_text("old")

    def no_space(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil.os, failing, no_space)
    with pytest.raises(OSError, match="No space left"):
        writer(target, b"new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["f"]


def test_unicode_text_is_utf8(tmp_path: Path) -> None:
    target = tmp_path / "t"
    fsutil.atomic_write_text(target, "décision → CPU")
    assert target.read_bytes() == "décision → CPU".encode()


def test_read_if_exists_distinguishes_missing_from_unreadable(tmp_path: Path) -> None:
    assert fsutil.read_if_exists(tmp_path / "absent") is None
    (tmp_path / "f").write_bytes(b"x")
    assert fsutil.read_if_exists(tmp_path / "f") == b"x"
    with pytest.raises(OSError) as exc:
        fsutil.read_if_exists(tmp_path)  # a directory: IsADirectoryError, not "missing"
    assert exc.value.strerror.startswith(f"{tmp_path}: cannot read: ")


def test_locked_excludes_another_holder_until_released(tmp_path: Path) -> None:
    import fcntl

    path = tmp_path / "sub" / ".lock"
    # another open file description cannot take it while the block runs
    with fsutil.locked(path), open(path, "a") as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(path, "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the block ended


def test_volatile_replace_creates_parents_and_sets_the_mode_whatever_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "run" / "scxctl" / "stats.json"
    old = os.umask(0o077)
    try:
        fsutil.replace_volatile(target, b'{"a": 1}\n')
        inode = target.stat().st_ino
        fsutil.replace_volatile(target, b'{"a": 2}\n')
    finally:
        os.umask(old)
    assert target.read_bytes() == b'{"a": 2}\n'
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # readable by the scxctl group's readers
    assert target.stat().st_ino != inode  # renamed over, never rewritten in place
    assert os.listdir(target.parent) == ["stats.json"]


def test_volatile_replace_writes_everything_across_short_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    monkeypatch.setattr(fsutil.os, "write", lambda fd, data: real_write(fd, bytes(data[:3])))
    fsutil.replace_volatile(tmp_path / "f", b"0123456789")
    assert (tmp_path / "f").read_bytes() == b"0123456789"


def test_volatile_json_is_one_sorted_line_that_read_owned_json_reads_back(tmp_path: Path) -> None:
    target = tmp_path / "run" / "snapshot.json"
    fsutil.replace_volatile_json(target, {"pid": 7, "b": [1, 2], "a": {"z": 0, "y": 1}})
    assert target.read_bytes() == b'{"a": {"y": 1, "z": 0}, "b": [1, 2], "pid": 7}\n'
    assert fsutil.read_owned_json(target, 7) == {"pid": 7, "b": [1, 2], "a": {"z": 0, "y": 1}}
    assert fsutil.read_owned_json(target, 8) is None  # another writer's
