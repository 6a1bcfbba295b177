"""The `scxctl` command line: global options, error handling, and the command list.

Command modules are imported only when their command runs or shows its own help: the root group
lists them from a static table, so `scxctl status` pays for Typer and a socket round trip, not for
Rich tables, the bench library or the pyland loader.
"""

from __future__ import annotations

import enum
import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from scxctl import __version__
from scxctl import log as logsetup
from scxctl.errors import ExitCode, ScxctlError, UsageError
from scxctl.ui import report_error

try:  # typer >= 0.20 vendors click; Debian's typer 0.15 uses the click package
    from typer import _click as click  # type: ignore[attr-defined]
except ImportError:
    import click

# click >= 8.2 raises it for a group called without a command (no_args_is_help): it shows the help
_NO_ARGS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


@dataclass(frozen=True)
class LazyCommand:
    """A root command known by name and help without importing its module.

    `help` must equal the first paragraph of the command's own help (tests/test_cli_lazy.py checks);
    `module` has `register(app: typer.Typer)`, which may register several of the table's commands.
    """

    name: str
    module: str
    help: str
    panel: str | None = None  # a Rich help panel of its own (None: "Commands")


LOADER_PANEL = "scx_loader compatible"  # the same text as commands/loader.py's PANEL


# Help order. Add a command here (not by importing its module in this file) to keep start-up cheap.
COMMANDS: tuple[LazyCommand, ...] = (
    LazyCommand(
        "doctor",
        "scxctl.commands.doctor",
        "Check the kernel, privileges, libbpf and toolchain for running sched_ext schedulers.",
    ),
    LazyCommand(
        "run",
        "scxctl.commands.run",
        "Run pyland (scheduling decisions in Python) in the foreground; Ctrl-C or SIGTERM detaches it.",
    ),
    LazyCommand(
        "enable",
        "scxctl.commands.lifecycle",
        "Run a scheduler under the daemon (started if needed) and keep it running across failures and boots.",
    ),
    LazyCommand(
        "switch",
        "scxctl.commands.lifecycle",
        "Change the running scheduler or its mode (scheduler name or --mode required).",
    ),
    LazyCommand(
        "disable",
        "scxctl.commands.lifecycle",
        "Stop the daemon's scheduler and return to the kernel's default scheduler (remembered across boots).",
    ),
    LazyCommand(
        "status",
        "scxctl.commands.lifecycle",
        "What runs now, from the kernel's point of view, and what the daemon wants and did.",
    ),
    LazyCommand(
        "stats",
        "scxctl.commands.stats",
        "What the running scheduler does, per second and in total: pyland's counters, the kernel's events.",
    ),
    LazyCommand(
        "list",
        "scxctl.commands.lifecycle",
        "Schedulers the daemon may run (pyland and the config's allow-list) and the modes.",
    ),
    LazyCommand(
        "logs",
        "scxctl.commands.logs",
        "Show the daemon's log: every lifecycle event with scheduler, pid and reason.",
    ),
    LazyCommand(
        "daemon",
        "scxctl.commands.daemon",
        "Supervise the desired scheduler and serve the control socket until SIGTERM/SIGINT (exit 0).",
    ),
    LazyCommand(
        "bench",
        "scxctl.commands.bench",
        "schtest-style scheduler tests (adaptive-priority, fairness), one scheduler or side by side.",
    ),
    LazyCommand(
        "trace",
        "scxctl.commands.trace",
        "Measure in the kernel (bcc): wake-up to run latency per process, name or cgroup.",
    ),
    # scx_loader's scxctl verbs, after ours in their own help panel (`switch` and `list` are above)
    LazyCommand("get", "scxctl.commands.loader",
                "Get the info on the running scheduler (scx_loader's wording).", LOADER_PANEL),
    LazyCommand("start", "scxctl.commands.loader",
                "Start a scheduler in a mode or with arguments (fails if one is enabled: use switch).",
                LOADER_PANEL),
    LazyCommand("stop", "scxctl.commands.loader",
                "Stop the current scheduler (the kernel's default scheduler runs; remembered across boots).",
                LOADER_PANEL),
    LazyCommand("restart", "scxctl.commands.loader",
                "Restart the current scheduler with original configuration (fails if none is enabled).",
                LOADER_PANEL),
    LazyCommand("restore", "scxctl.commands.loader",
                "Restore the default scheduler from configuration (default_scheduler in default_mode).",
                LOADER_PANEL),
    LazyCommand("modes", "scxctl.commands.loader",
                "List the modes a scheduler can be started or switched in.", LOADER_PANEL),
)


def load_commands(module: str) -> dict[str, Any]:
    """The commands a module registers, as Typer builds them (the same objects as if eager)."""
    sub = typer.Typer()
    importlib.import_module(module).register(sub)
    return dict(typer.main.get_group(sub).commands)


class _ScxctlGroup(TyperGroup):
    """Turns ScxctlError and Ctrl-C into one line on stderr and a documented exit code.

    Commands in `lazy` are listed from the table and built only when resolved for running or for
    their own help; the group's own help and shell completion of command names use stand-ins that
    carry the table's help text (the click "LazyGroup" pattern).
    """

    lazy: ClassVar[tuple[LazyCommand, ...]] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: dict[str, dict[str, Any]] = {}
        self._listing = False

    @contextmanager
    def _listing_only(self) -> Iterator[None]:
        previous, self._listing = self._listing, True
        try:
            yield
        finally:
            self._listing = previous

    def list_commands(self, ctx: Any) -> list[str]:
        names = [c.name for c in self.lazy]
        return names + [n for n in super().list_commands(ctx) if n not in names]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        entry = next((c for c in self.lazy if c.name == cmd_name), None)
        if entry is None:
            return super().get_command(ctx, cmd_name)
        if self._listing:
            return TyperCommand(name=entry.name, help=entry.help, rich_help_panel=entry.panel)
        if entry.module not in self._loaded:
            self._loaded[entry.module] = load_commands(entry.module)
        return self._loaded[entry.module][entry.name]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        with self._listing_only():
            super().format_help(ctx, formatter)

    def shell_complete(self, ctx: Any, incomplete: str) -> Any:
        with self._listing_only():
            return super().shell_complete(ctx, incomplete)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ScxctlError as exc:
            report_error(exc)
            raise typer.Exit(int(exc.code)) from None
        except KeyboardInterrupt:
            report_error(ScxctlError("interrupted", ExitCode.INTERRUPTED))
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None


class _RootGroup(_ScxctlGroup):
    lazy = COMMANDS


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
    cls=_RootGroup,
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


def main(args: list[str] | None = None) -> None:
    run_app(app, "scxctl", args)


def run_app(typer_app: typer.Typer, prog_name: str, args: list[str] | None = None,
            prog: str = "scxctl") -> None:
    """Run a Typer app; click's usage errors end in our one-line format, not in a Rich box."""
    try:
        rv = typer_app(args=args, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.UsageError as exc:
        if isinstance(exc, _NO_ARGS_HELP):
            exc.show()
            sys.exit(int(ExitCode.USAGE))
        hint = f"see '{exc.ctx.command_path} -h'" if exc.ctx is not None else None
        report_error(UsageError(exc.format_message(), hint=hint), prog)
        sys.exit(int(ExitCode.USAGE))
    except click.exceptions.ClickException as exc:
        report_error(ScxctlError(exc.format_message()), prog)
        sys.exit(exc.exit_code)
    except typer.Abort:  # EOF at a prompt, or Ctrl-C while click parsed
        report_error(ScxctlError("interrupted", ExitCode.INTERRUPTED), prog)
        sys.exit(int(ExitCode.INTERRUPTED))
    sys.exit(rv if isinstance(rv, int) else 0)
