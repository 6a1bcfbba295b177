"""`scxctl logs`: the daemon's JSON log file, pretty-printed (or raw with --json), optionally followed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any

import typer

from scxctl import paths, ui
from scxctl.errors import PermissionDenied, ScxctlError

_FIRST = ("scheduler", "pid", "reason")
_SKIP = {"timestamp", "level", "event", "logger", *_FIRST}
_STYLE = {"debug": "dim", "info": "green", "warning": "yellow", "error": "red", "critical": "bold red"}


def format_line(line: str) -> str:
    """One log line for humans: time, level, event, then scheduler/pid/reason, then the rest as k=v."""
    try:
        rec: Any = json.loads(line)
    except json.JSONDecodeError:
        return line
    if not isinstance(rec, dict):
        return line
    parts = [
        str(rec.get("timestamp", ""))[:23].replace("T", " "),
        f"{rec.get('level', '?'):8}",
        str(rec.get("event", "")),
    ]
    for key in (*_FIRST, *sorted(k for k in rec if k not in _SKIP)):
        if rec.get(key) is not None:
            value = rec[key]
            parts.append(f"{key}={value if isinstance(value, (int, float)) else json.dumps(value)}")
    return " ".join(parts)


def tail_lines(path: Path, n: int, block: int = 65536) -> tuple[list[str], int, int]:
    """The last n lines of a (possibly large) file, read backwards from its end; plus its inode and
    the offset they end at, so a follower continues exactly there."""
    with path.open("rb") as f:
        ino = os.fstat(f.fileno()).st_ino
        end = pos = f.seek(0, os.SEEK_END)
        data = b""
        while pos > 0 and data.count(b"\n") <= n:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    lines = [ln.decode("utf-8", "replace") for ln in data.splitlines()[-n:]] if n > 0 else []
    return lines, ino, end


def _emit(line: str, raw: bool) -> None:
    if raw:
        ui.out.print(line, markup=False, highlight=False, soft_wrap=True)
        return
    try:
        level = str(json.loads(line).get("level", ""))
    except (json.JSONDecodeError, AttributeError):
        level = ""
    ui.out.print(format_line(line), style=_STYLE.get(level), markup=False, highlight=False, soft_wrap=True)


def _follow(path: Path, raw: bool, start: tuple[int, int] | None, poll_s: float = 0.25) -> None:
    """Print lines as they are appended (from `start` = (inode, offset) when that file is still
    there); reopen from the beginning when the file is rotated or truncated."""
    f: IO[bytes] | None = None
    ino = None
    try:
        while True:
            if f is None:
                try:
                    f = path.open("rb")
                    ino = os.fstat(f.fileno()).st_ino
                except FileNotFoundError:
                    time.sleep(poll_s)
                    continue
                if start is not None and start[0] == ino:
                    f.seek(start[1])
                start = None
            line = f.readline()
            if line.endswith(b"\n"):
                _emit(line.decode("utf-8", "replace").rstrip("\n"), raw)
                continue
            f.seek(-len(line), os.SEEK_CUR)
            time.sleep(poll_s)
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if st.st_ino != ino or st.st_size < f.tell():
                f.close()
                f = None
    finally:
        if f is not None:
            f.close()


def logs(
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines (Ctrl-C to stop)."),
    lines: int = typer.Option(50, "--lines", "-n", min=0, help="How many of the last lines to print."),
    raw: bool = typer.Option(False, "--json", help="Print the JSON lines unchanged."),
) -> None:
    """Show the daemon's log: every lifecycle event with scheduler, pid and reason."""
    path = paths.daemon_log_file()
    start = None
    try:
        shown, ino, end = tail_lines(path, lines)
        start = (ino, end)
        for line in shown:
            _emit(line, raw)
    except FileNotFoundError:
        if not follow:
            raise ScxctlError(f"no daemon log at {path} (has the daemon run?)") from None
    except PermissionError:
        raise PermissionDenied(f"cannot read {path}", hint="run as root or as a member of adm") from None
    if follow:
        try:
            _follow(path, raw, start)
        except KeyboardInterrupt:
            return


def register(app: typer.Typer) -> None:
    app.command("logs")(logs)
