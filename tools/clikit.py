"""What the development tools' command lines (tools.vm, tools.deb) share: their global options and
how a failure ends a command (scxctl's one-line error format, the error's own exit code)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from scxctl import log as logsetup
from scxctl.errors import ScxctlError
from scxctl.ui import report_error

QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="Only warnings and errors on stderr.")]


def configure_logging(quiet: bool) -> None:
    logsetup.configure("auto", logging.WARNING if quiet else logging.INFO)


def fail(exc: ScxctlError, prog: str) -> typer.Exit:
    """Print `exc` as one error line (and its hint) and return the Exit carrying its code."""
    report_error(exc, prog)
    return typer.Exit(int(exc.code))
