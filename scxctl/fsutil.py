"""Atomic file writes (whatever is persisted is either the old or the new content, never a mix) and
the one cross-process file lock."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write to a temp file in the same directory, fsync it, rename over `path`, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dirfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW


def replace_volatile(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Atomic but not durable, for the runtime directory (a tmpfs a reboot empties anyway): a reader
    sees the old content or the new, never a mix, but nothing is fsynced and the temp file is named
    by the writer's pid. The scheduler's loop publishes its counters so every second, and under
    emulation each system call and path object it saves is CPU time the workload was waiting for."""
    name = os.fspath(path)
    head, tail = os.path.split(name)
    tmp = os.path.join(head, f".{tail}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, _NEW_FILE, mode)
    except FileNotFoundError:
        os.makedirs(head, exist_ok=True)
        fd = os.open(tmp, _NEW_FILE, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the mode asked for, not the umask's
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, name)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def replace_volatile_json(path: Path, doc: dict[str, Any]) -> None:
    """`doc` as one line of sorted JSON, by `replace_volatile`: the snapshots readers poll."""
    replace_volatile(path, (json.dumps(doc, sort_keys=True) + "\n").encode())


def read_if_exists(path: Path) -> bytes | None:
    """The file's bytes, or None when it does not exist (a first start: defaults apply).

    Any other OSError is raised with a one-line message naming the file, as `OSError.strerror`.
    """
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OSError(exc.errno, f"{path}: cannot read: {exc.strerror or exc}") from exc


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created with its parents) for the block: serialises
    processes that build or use one cache entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def read_owned_json(path: Path, pid: int | None = None) -> dict[str, Any] | None:
    """A JSON object a process wrote for others (its `pid` inside), or None when there is none, it
    is unreadable, or (given `pid`) it is another process's."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or (pid is not None and doc.get("pid") != pid):
        return None
    return doc


def remove_owned(path: Path, pid: int) -> None:
    """Remove `path` if process `pid` wrote it: a newer writer's file stays."""
    if read_owned_json(path, pid) is not None:
        with contextlib.suppress(OSError):
            path.unlink()
