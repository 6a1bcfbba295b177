"""The `scxctl` command line: global options, error handling, and the command list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import enum

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
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    log_format: LogFormatChoice = typer.Option(
        LogFormatChoice.auto,
        "--log-format",
        help="Log rendering: console on a TTY and JSON lines otherwise (auto), or forced.",
    ),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="More log output (debug)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only warnings and errors in the log."),
) -> None:
    opts = GlobalOptions(log_format=log_format.value, verbose=verbose, quiet=quiet)  # type: ignore[arg-type]
    ctx.obj = opts
    logsetup.configure(opts.log_format, logsetup.level_for(verbose, quiet))


def global_options(ctx: typer.Context) -> GlobalOptions:
    root = ctx.find_root()
    return root.obj if isinstance(root.obj, GlobalOptions) else GlobalOptions()


# Each command module registers itself; keep this list in help order.
from scxctl.commands import doctor  # noqa: E402

doctor.register(app)


def main() -> None:
    app(prog_name="scxctl")
