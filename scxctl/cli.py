"""The `scxctl` command line: global options, error handling, and the command list."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from scxctl import __version__
from scxctl import log as logsetup
from scxctl.errors import ExitCode, ScxctlError
from scxctl.ui import report_error


class _ScxctlGroup(TyperGroup):
    """Turns ScxctlError and Ctrl-C into one line on stderr and a documented exit code."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ScxctlError as exc:
            report_error(exc)
            raise typer.Exit(int(exc.code)) from None
        except KeyboardInterrupt:
            report_error(ScxctlError("interrupted", ExitCode.INTERRUPTED))
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None


class LogFormatChoice(enum.StrEnum):
    auto = "auto"
    console = "console"
    json = "json"


@dataclass
class GlobalOptions:
    log_format: logsetup.LogFormat = "auto"
    verbose: int = 0
    quiet: bool = False


app = typer.Typer(
    name="scxctl",
    cls=_ScxctlGroup,
    help="Run, manage and measure sched_ext schedulers, including pyland (scheduling decisions in Python).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"scxctl {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    log_format: Annotated[
        LogFormatChoice,
        typer.Option(
            "--log-format",
            help="Log rendering: console on a TTY and JSON lines otherwise (auto), or forced.",
        ),
    ] = LogFormatChoice.auto,
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="More log output (debug).")
    ] = 0,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Only warnings and errors in the log.")
    ] = False,
) -> None:
    fmt: logsetup.LogFormat = log_format.value  # type: ignore[assignment]
    opts = GlobalOptions(log_format=fmt, verbose=verbose, quiet=quiet)
    ctx.obj = opts
    logsetup.configure(opts.log_format, logsetup.level_for(verbose, quiet))


def global_options(ctx: typer.Context) -> GlobalOptions:
    root = ctx.find_root()
    return root.obj if isinstance(root.obj, GlobalOptions) else GlobalOptions()


# Each command module registers itself; keep this list in help order.
from scxctl.commands import (  # noqa: E402
    bench,
    doctor,
    lifecycle,
    logs,
)
from scxctl.commands import daemon as daemon_cmd  # noqa: E402
from scxctl.commands import run as run_cmd  # noqa: E402

doctor.register(app)
run_cmd.register(app)
lifecycle.register(app)
logs.register(app)
daemon_cmd.register(app)
bench.register(app)


def main() -> None:
    app(prog_name="scxctl")
