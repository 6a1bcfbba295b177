"""`scxctl bench`: schtest's adaptive_priority and fairness tests, for one scheduler or side by side."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.table import Table

from scxctl import ui
from scxctl.bench.runner import TESTS, BenchOptions, Hooks, run_bench, save
from scxctl.bench.scheduler import SchedulerSpec, parse_scheduler
from scxctl.errors import UsageError

bench_app = typer.Typer(
    name="bench",
    help="schtest-style scheduler tests (adaptive-priority, fairness), one scheduler or side by side.",
    no_args_is_help=True,
)

MIN_TIME = typer.Option(5.0, "--min-time", help="A measurement counts once it lasts this long (s).")
MAX_TIME = typer.Option(10.0, "--max-time", help="Stop after the first measurement longer than this (s).")
CPU = typer.Option(
    None, "--cpu", help="adaptive-priority's CPU (default: first hyperthread of the first core)."
)
JSON_OUT = typer.Option(False, "--json",
                        help="Print the JSON report (schema in docs/reference.md) instead of tables.")
OUTPUT = typer.Option(None, "--output", help="Also write the JSON report to FILE (atomically).")
QUIET = typer.Option(False, "--quiet", help="No progress or distributions: one line per test and scheduler.")
SCHEDULER = typer.Option(
    "default", "--scheduler", help="default | pyland[:POLICY] | /path/to/scx_binary (its ARGS after --)."
)
COMPARE = typer.Option(None, "--compare", help="Comma-separated schedulers run in turn, e.g. default,pyland.")
PARTIAL = typer.Option(
    False,
    "--partial",
    help="Start the scheduler in partial mode (pyland: --partial; external: pass its flag).",
)
OPS_NAME = typer.Option(
    None, "--ops-name", help="Expected /sys/kernel/sched_ext/root/ops (default: derived)."
)
TRACE = typer.Option(
    False, "--trace", help="Also measure the workers' wake-up to run latency in the kernel (bcc; root)."
)
START_TIMEOUT = typer.Option(60.0, "--start-timeout", help="Seconds to wait for the scheduler to be enabled.")
ARGS = typer.Argument(None, help="Arguments for an external scheduler binary (after --).")


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM takes the Ctrl-C path, so the same cleanup stops workloads and the scheduler."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _schedulers(
    scheduler: str, compare: str | None, args: list[str], partial: bool, ops_name: str | None
) -> list[SchedulerSpec]:
    if compare is None:
        return [parse_scheduler(scheduler, args, partial, ops_name)]
    if scheduler != "default":
        raise UsageError("use either --scheduler or --compare, not both")
    names = [n.strip() for n in compare.split(",") if n.strip()]
    if len(names) < 2:
        raise UsageError("--compare needs at least two schedulers, e.g. --compare default,pyland")
    return [
        parse_scheduler(n, [] if n == "default" else args, partial and n != "default", ops_name)
        for n in names
    ]


def _run(
    tests: list[str],
    min_time: float,
    max_time: float,
    cpu: int | None,
    json_output: bool,
    output: Path | None,
    quiet: bool,
    scheduler: str,
    compare: str | None,
    partial: bool,
    ops_name: str | None,
    start_timeout: float,
    args: list[str] | None,
    trace: bool = False,
) -> None:
    from scxctl.bench.render import LiveProgress, print_report, quiet_lines

    opts = BenchOptions(
        tests=tests,
        schedulers=_schedulers(scheduler, compare, list(args or []), partial, ops_name),
        min_time=min_time,
        max_time=max_time,
        cpu=cpu,
        start_timeout_s=start_timeout,
        trace=trace,
    )
    live = LiveProgress(
        ui.err, enabled=not (quiet or json_output), log_measurements=not (quiet or json_output)
    )
    hooks = Hooks(begin_test=live.begin_test, end_test=live.end_test)
    hooks.env.heartbeat = live.heartbeat
    hooks.env.on_start = live.on_start
    hooks.env.on_done = live.on_done
    with _sigterm_as_interrupt():
        try:
            report = run_bench(opts, hooks)
        finally:
            live.close()
    text = json.dumps(report, indent=2) + "\n"
    saved = save(report, text, output)
    if json_output:
        ui.print_json(report)
    elif quiet:
        for line in quiet_lines(report):
            ui.out.print(line)
    else:
        print_report(report, ui.out)
        ui.out.print(f"[dim]saved {saved}[/dim]")
    if report["exit_code"]:
        raise typer.Exit(report["exit_code"])


def _command(tests: list[str], doc: str) -> object:
    def command(
        min_time: float = MIN_TIME,
        max_time: float = MAX_TIME,
        cpu: int | None = CPU,
        json_output: bool = JSON_OUT,
        output: Path | None = OUTPUT,
        quiet: bool = QUIET,
        scheduler: str = SCHEDULER,
        compare: str | None = COMPARE,
        partial: bool = PARTIAL,
        ops_name: str | None = OPS_NAME,
        start_timeout: float = START_TIMEOUT,
        trace: bool = TRACE,
        args: list[str] | None = ARGS,
    ) -> None:
        _run(
            tests,
            min_time,
            max_time,
            cpu,
            json_output,
            output,
            quiet,
            scheduler,
            compare,
            partial,
            ops_name,
            start_timeout,
            args,
            trace,
        )

    command.__doc__ = doc
    return command


_EXIT = (
    "\n\nExit status: 0 every test passed; 1 a test failed or is UNRELIABLE (too few samples); 2 usage;"
    " 3 permission; 4 no sched_ext; 5 another scheduler is loaded; 8 the scheduler left mid-run (INVALID);"
    " 130 interrupted."
)

bench_app.command("adaptive-priority")(
    _command(
        ["adaptive-priority"], "Does the scheduler favour a task that sleeps a lot? (pass < 0.50)" + _EXIT
    )
)
bench_app.command("fairness")(
    _command(["fairness"], "Do pinned and unpinned CPU hogs get comparable CPU time? (pass >= 0.60)" + _EXIT)
)
bench_app.command("all")(_command(list(TESTS), "Run adaptive-priority, then fairness." + _EXIT))


_WORKLOAD_EXIT = (
    "\n\nExit status: 0 every run completed; 1 a run failed, timed out or its scheduler did not start;"
    " 2 usage (unknown scheduler, command not found, a --metric matching nothing in the first run);"
    " 3 permission; 4 no sched_ext; 5 another scheduler is loaded; 8 a run was invalid (its scheduler"
    " left, or another sched_ext scheduler ran during a default run); 130 interrupted."
)


@bench_app.command(
    "workload",
    context_settings={"allow_interspersed_args": False},
    help="A/B any command under several schedulers, rounds in rotating order, ratios with 95% intervals."
    + _WORKLOAD_EXIT,
)
def workload(
    command: Annotated[list[str], typer.Argument(metavar="-- CMD [ARGS]...", help="The command to run.")],
    compare: Annotated[str, typer.Option(
        "--compare",
        help="Comma-separated: default, pyland[:POLICY], or PATH [ARGS] of an scx binary. The first is "
             "the base of the ratios; a name given twice is an A/A comparison.")] = "default,pyland",
    rounds: Annotated[int | None, typer.Option(
        "--rounds", min=1, show_default="6: the fewest that can give a verdict",
        help="Counted rounds; each runs the command once under every scheduler.")] = None,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Rounds run first and not counted.")] = 1,
    metric: Annotated[list[str] | None, typer.Option(
        "--metric", metavar="NAME=REGEX[:higher|lower]",
        help="Also compare the number REGEX's group captures (last match); repeatable.")] = None,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", metavar="S",
        help="A run longer than S seconds is killed and recorded as failed.")] = None,
    user: Annotated[str | None, typer.Option(
        "--user", help="Run the command as this user (the schedulers as root).")] = None,
    keep_output: Annotated[Path | None, typer.Option(
        "--keep-output", metavar="DIR", help="Keep every run's output in DIR (one file per run).")] = None,
    json_output: bool = JSON_OUT,
    output: Path | None = OUTPUT,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress display; the table only.")] = False,
    partial: bool = PARTIAL,
    ops_name: str | None = OPS_NAME,
    start_timeout: float = START_TIMEOUT,
) -> None:
    from scxctl.bench import parsers
    from scxctl.bench import workload as wl
    from scxctl.bench.runner import save
    from scxctl.bench.workload_render import WorkloadProgress, print_report

    opts = wl.WorkloadOptions(
        command=wl.resolve_command(command),
        schedulers=wl.parse_compare(compare, partial, ops_name),
        rounds=wl.DEFAULT_ROUNDS if rounds is None else rounds,
        warmup=warmup,
        metrics=parsers.custom_metrics(metric or []),
        timeout_s=timeout,
        user=wl.resolve_user(user) if user else None,
        keep_output=keep_output,
        start_timeout_s=start_timeout,
    )
    progress = WorkloadProgress(ui.err, enabled=not (quiet or json_output))
    hooks = wl.Hooks(run_start=progress.run_start, waiting=progress.waiting, run_end=progress.run_end)
    with _sigterm_as_interrupt():
        try:
            report = wl.run_workload(opts, hooks)
        finally:
            progress.close()
    saved = save(report, json.dumps(report, indent=2) + "\n", output, tag="workload")
    if json_output:
        ui.print_json(report)
    else:
        print_report(report, ui.out)
        ui.out.print(f"[dim]saved {saved}[/dim]")
    if report["exit_code"]:
        raise typer.Exit(report["exit_code"])


@bench_app.command("list")
def list_tests(json_output: bool = JSON_OUT) -> None:
    """List the tests with their pass thresholds."""
    if json_output:
        ui.print_json(
            [
                {
                    "command": t.cli_name,
                    "test": t.name,
                    "threshold": t.threshold,
                    "direction": t.direction,
                    "summary": t.summary,
                }
                for t in TESTS.values()
            ]
        )
        return
    table = Table(title="scxctl bench tests")
    for col in ("command", "schtest name", "pass if", "measures"):
        table.add_column(col)
    for t in TESTS.values():
        table.add_row(t.cli_name, t.name, f"metric {t.direction} {t.threshold:.2f}", t.summary)
    ui.out.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
