"""`scxctl daemon`: the supervising daemon in the foreground (systemd's ExecStart)."""

from __future__ import annotations

import sys

import typer

from scxctl import log as logsetup
from scxctl import paths
from scxctl.errors import PermissionDenied


def daemon(ctx: typer.Context) -> None:
    """Supervise the desired scheduler and serve the control socket until SIGTERM/SIGINT (exit 0).

    Logs JSON lines to stdout (the journal) and to the rotating daemon log file.
    """
    import asyncio

    from scxctl.cli import global_options
    from scxctl.daemon.service import Daemon

    opts = global_options(ctx)
    try:
        logsetup.configure(
            "json",
            logsetup.level_for(opts.verbose, opts.quiet),
            stream=sys.stdout,
            file=paths.daemon_log_file(),
        )
    except OSError as exc:
        raise PermissionDenied(
            f"cannot write the daemon log {paths.daemon_log_file()}: {exc.strerror}",
            hint="run as root, or set SCXCTL_LOG_DIR",
        ) from None
    raise typer.Exit(asyncio.run(Daemon().run()))


def register(app: typer.Typer) -> None:
    app.command("daemon")(daemon)
