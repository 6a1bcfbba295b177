"""The one structlog set-up for the whole program.

Console rendering on a TTY, JSON lines otherwise (or when asked), through the stdlib logging
machinery so that a daemon can add a rotating file handler with the same processors.

structlog (and the Rich tracebacks it pulls in) costs a few hundred milliseconds to import, which
would dominate short commands such as `scxctl status`. So `configure()` only records the settings,
and loggers returned by `get_logger()` import and apply them on their first use. Code that must not
import anything later (the pyland loop after attaching) calls `activate()` up front.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import structlog

LogFormat = Literal["auto", "console", "json"]


@dataclass
class _Settings:
    fmt: LogFormat = "auto"
    level: int = logging.INFO
    stream: IO[str] | None = None
    file: Path | None = None
    file_max_bytes: int = 10 * 1024 * 1024
    file_backups: int = 5


_pending: _Settings | None = _Settings()  # applied on first use; None once applied
_current = _Settings()


def level_for(verbose: int, quiet: bool) -> int:
    if quiet:
        return logging.WARNING
    return logging.DEBUG if verbose > 0 else logging.INFO


def configure(
    fmt: LogFormat = "auto",
    level: int = logging.INFO,
    stream: IO[str] | None = None,
    file: Path | None = None,
    file_max_bytes: int = 10 * 1024 * 1024,
    file_backups: int = 5,
) -> None:
    """(Re)configure logging; idempotent, so tests and the daemon may call it again."""
    global _pending
    _pending = _Settings(fmt, level, stream, file, file_max_bytes, file_backups)
    # Already-active logging is re-applied at once, so a reconfiguration is never half done.
    if "structlog" in sys.modules:
        activate()


def activate() -> None:
    """Import structlog and apply the recorded settings now (idempotent)."""
    global _pending, _current
    if _pending is None:
        return
    settings, _pending = _pending, None
    _current = settings
    _apply(settings)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to sys.stderr as it is at each record, not as it was when logging was set up.

    pytest swaps sys.stderr for every test and closes the old one; a handler holding the stream of
    the test that first logged would fail ("I/O operation on closed file") and lose every later
    record, the harness's panic diagnostics among them.
    """

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # StreamHandler.__init__ would bind today's sys.stderr

    @property  # type: ignore[override]
    def stream(self) -> IO[str]:
        return sys.stderr


def _apply(s: _Settings) -> None:
    import logging.handlers

    import structlog

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]

    def handler(h: logging.Handler, renderer: Any) -> logging.Handler:
        h.setFormatter(
            structlog.stdlib.ProcessorFormatter(
                foreign_pre_chain=shared,
                processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            )
        )
        return h

    console = logging.StreamHandler(s.stream) if s.stream is not None else _StderrHandler()
    tty = getattr(console.stream, "isatty", lambda: False)()
    fmt = ("console" if tty else "json") if s.fmt == "auto" else s.fmt
    renderer = (
        structlog.dev.ConsoleRenderer(colors=tty)
        if fmt == "console"
        else structlog.processors.JSONRenderer(sort_keys=True)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler(console, renderer))
    if s.file is not None:
        s.file.parent.mkdir(parents=True, exist_ok=True)
        rotating = logging.handlers.RotatingFileHandler(
            s.file, maxBytes=s.file_max_bytes, backupCount=s.file_backups, encoding="utf-8"
        )
        root.addHandler(handler(rotating, structlog.processors.JSONRenderer(sort_keys=True)))
    root.setLevel(s.level)
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


class _LazyLogger:
    """Stands in for a structlog logger until the first call, which imports and configures."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        activate()
        import structlog

        return getattr(structlog.get_logger(self._name), attr)


def get_logger(name: str = "scxctl") -> structlog.stdlib.BoundLogger:
    return _LazyLogger(name)  # type: ignore[return-value]


def json_events(text: str) -> list[dict[str, Any]]:
    """The events among a log's lines, as `configure("json")` writes them: plain output mixed in, and
    a line cut short (a log read while it is written), are skipped."""
    out = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out
