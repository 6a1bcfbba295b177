"""`scxctl doctor`: render the doctor checks as a table or JSON."""

from __future__ import annotations

import typer
from rich.table import Table

from scxctl import ui
from scxctl.doctor.model import CheckResult, Status
from scxctl.doctor.runner import report, run_checks, summary
from scxctl.errors import ExitCode

_STYLE = {Status.OK: "green", Status.WARN: "yellow", Status.FAIL: "bold red", Status.SKIP: "dim"}


def _table(results: list[CheckResult]) -> Table:
    table = Table(title="scxctl doctor", show_lines=False, expand=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("finding / what to do")
    for r in results:
        text = r.finding if not r.hint else f"{r.finding}\n[italic]-> {r.hint}[/italic]"
        table.add_row(r.id, f"[{_STYLE[r.status]}]{r.status.value}[/]", text)
    return table


def doctor(json_output: bool = typer.Option(False, "--json", help="Print the stable JSON report.")) -> None:
    """Check the kernel, privileges, libbpf and toolchain for running sched_ext schedulers.

    Exit status: 0 when no check failed, 1 when any check failed, 2 on usage errors.
    """
    results = run_checks()
    if json_output:
        ui.print_json(report(results))
    else:
        ui.out.print(_table(results))
        counts = summary(results)
        ui.out.print(
            f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail, {counts['skip']} skip"
        )
        verdict = next((r for r in results if r.id == "verdict"), None)
        if verdict is not None:
            ui.out.print(f"[{_STYLE[verdict.status]}]Verdict: {verdict.finding}[/]", markup=True)
            if verdict.hint:
                ui.out.print(f"What to do: {verdict.hint}", markup=False)
    if any(r.status is Status.FAIL for r in results):
        raise typer.Exit(int(ExitCode.FAILURE))


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
