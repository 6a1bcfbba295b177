"""The one structlog set-up for the whole program.

Console rendering on a TTY, JSON lines otherwise (or when asked), through the stdlib logging
machinery so that a daemon can add a rotating file handler with the same processors.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path
from typing import IO, Literal

import structlog

LogFormat = Literal["auto", "console", "json"]

_SHARED_PROCESSORS: list[structlog.types.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
    structlog.processors.format_exc_info,
]


def level_for(verbose: int, quiet: bool) -> int:
    if quiet:
        return logging.WARNING
    return logging.DEBUG if verbose > 0 else logging.INFO


def _renderer(fmt: LogFormat, stream: IO[str]) -> structlog.types.Processor:
    if fmt == "auto":
        fmt = "console" if getattr(stream, "isatty", lambda: False)() else "json"
    if fmt == "console":
        return structlog.dev.ConsoleRenderer(colors=getattr(stream, "isatty", lambda: False)())
    return structlog.processors.JSONRenderer(sort_keys=True)


def _handler(handler: logging.Handler, renderer: structlog.types.Processor) -> logging.Handler:
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=_SHARED_PROCESSORS,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    return handler


def configure(
    fmt: LogFormat = "auto",
    level: int = logging.INFO,
    stream: IO[str] | None = None,
    file: Path | None = None,
    file_max_bytes: int = 10 * 1024 * 1024,
    file_backups: int = 5,
) -> None:
    """(Re)configure logging; idempotent, so tests and the daemon may call it again."""
    stream = stream if stream is not None else sys.stderr
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(_handler(logging.StreamHandler(stream), _renderer(fmt, stream)))
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        rotating = logging.handlers.RotatingFileHandler(
            file, maxBytes=file_max_bytes, backupCount=file_backups, encoding="utf-8"
        )
        root.addHandler(_handler(rotating, structlog.processors.JSONRenderer(sort_keys=True)))
    root.setLevel(level)
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_SHARED_PROCESSORS,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "scxctl") -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
