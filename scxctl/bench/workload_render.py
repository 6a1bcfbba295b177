"""Terminal output of `scxctl bench workload`: a progress bar over the runs, then one comparison table."""

from __future__ import annotations

import shlex
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from scxctl.bench import ab_stats

_VERDICT_STYLE = {"better": "bold green", "worse": "bold red", "same": "dim", "more": "yellow",
                  "less": "yellow"}
_STATUS_STYLE = {"failed": "red", "timeout": "red", "invalid": "magenta", "error": "red"}
FLOOR_FACTOR = 20  # a median run under this many spawn floors is measured partly by the harness


def fmt_value(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


class WorkloadProgress:
    """One bar over every run; redrawn at run boundaries and at the harness's once-a-second wake-up
    (no refresh thread: it would compete with the workload for the CPUs)."""

    def __init__(self, console: Console, enabled: bool) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
            console=console, transient=True, auto_refresh=False, disable=not enabled)
        self.enabled = enabled
        self.task: TaskID | None = None
        self.label = ""

    def run_start(self, run: dict[str, Any], done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task("", total=max(total, 1), note="")
        if run["round"] is None:
            self.label = "probe (checks --metric, nothing switched)"
        else:
            rnd = run["round"]
            where = f"warm-up {-rnd}" if rnd < 0 else f"round {rnd + 1}"
            self.label = f"{where} · {run['scheduler']}"
        self.progress.update(self.task, total=max(total, 1), completed=done, description=self.label, note="")
        self.progress.refresh()

    def waiting(self, elapsed: float) -> None:
        if self.task is not None:
            self.progress.update(self.task, note=f"running {elapsed:.0f}s")
            self.progress.refresh()

    def run_end(self, run: dict[str, Any]) -> None:
        if self.task is not None and run["status"] != "ok":
            self.progress.console.print(f"[{_STATUS_STYLE.get(run['status'], '')}]{self.label}: "
                                        f"{describe_run(run)}[/]")

    def close(self) -> None:
        if self.task is not None:
            self.progress.stop()
            self.task = None


def describe_run(run: dict[str, Any]) -> str:
    s = run["status"]
    if s == "ok":
        return "ok"
    if s == "failed":
        why = f": {run['error']}" if run["error"] else ""
        return f"failed (exit status {run['exit_status']}){why}"
    if s == "timeout":
        return "timed out"
    if s == "invalid":
        return f"invalid: {run['invalid_reason']}"
    return f"error: {run['error']}"


def _cell(entry: dict[str, Any], first: bool) -> str:
    summ = entry["summary"]
    if summ is None:
        return "-"
    spread = summ["spread_pct"]
    text = f"{fmt_value(summ['median'])}" + ("" if spread is None else f" ±{spread / 2:.1f}%")
    if first:
        return text
    vs = entry["vs_first"]
    if vs is None:
        return text
    verdict = entry["verdict"]
    style = _VERDICT_STYLE.get(verdict or "", "")
    said = f"[{style}]{verdict}[/]" if verdict else "[dim]no verdict[/]"
    return f"{text}\n{vs['ratio']:.3f}x [{vs['ci_low']:.3f}, {vs['ci_high']:.3f}] {said}"


def table(report: dict[str, Any]) -> Table:
    labels = [s["name"] for s in report["schedulers"]]
    t = Table(title=f"{shlex.join(report['options']['command'])}", show_lines=True, expand=False)
    t.add_column("metric", style="bold", no_wrap=True)
    t.add_column("better", no_wrap=True)
    for i, lb in enumerate(labels):
        t.add_column(lb if i == 0 else f"{lb}\nvs {labels[0]} [95%]")
    for name, res in report["results"].items():
        unit = f" ({res['unit']})" if res["unit"] else ""
        cells = [_cell(res["schedulers"][lb], i == 0) for i, lb in enumerate(labels)]
        t.add_row(f"{name}{unit}", res["direction"] or "-", *cells)
    return t


def notes(report: dict[str, Any]) -> list[str]:
    """What a reader needs beside the table: rounds and order, failed runs, load, the harness."""
    opts, runs = report["options"], report["runs"]
    counted = [r for r in runs if not r["warmup"]]
    orders = [" → ".join(o["schedulers"]) for o in report["order"] if not o["warmup"]]
    lines = [f"{opts['rounds']} rounds (+{opts['warmup']} warm-up), order rotating: "
             + "; ".join(dict.fromkeys(orders))]
    ok = sum(1 for r in counted if r["status"] == "ok")
    lines.append(f"counted runs: {ok} of {len(counted)} ok; values are median ±half the range; "
                 f"ratios are medians over the rounds both completed")
    for r in runs:
        if r["status"] != "ok":
            where = "warm-up" if r["warmup"] else f"round {r['round'] + 1}"
            style = _STATUS_STYLE.get(r["status"], "")
            lines.append(f"[{style}]{where}, {r['scheduler']}: {describe_run(r)}[/]")
    if opts["rounds"] < ab_stats.MIN_VERDICT_ROUNDS:
        lines.append(f"[yellow]{opts['rounds']} rounds: intervals shown, no verdict "
                     f"(a 95% verdict needs at least {ab_stats.MIN_VERDICT_ROUNDS})[/]")
    loads = {}
    for r in counted:
        if r["before"]["loadavg_1m"] is not None:
            loads.setdefault(r["scheduler"], []).append(r["before"]["loadavg_1m"])
    if loads:
        lines.append("load before runs (1-min avg): " + ", ".join(
            f"{lb} {min(v):.2f}-{max(v):.2f}" for lb, v in loads.items()))
    h = report["harness"]
    cpu = [r["harness_cpu_s"] for r in counted if r["harness_cpu_s"] is not None]
    lines.append(f"harness: spawn-and-wait floor {h['wall_s_median'] * 1e3:.2f} ms (median of {h['runs']} "
                 f"{h['command']}); one wake-up per {h['poll_interval_s']:g} s while a run goes, "
                 f"at most {max(cpu, default=0) * 1e3:.1f} ms of its own CPU per run")
    walls = [e["summary"]["median"] for e in report["results"]["wall_s"]["schedulers"].values()
             if e["summary"]]
    if walls and min(walls) < FLOOR_FACTOR * h["wall_s_median"]:
        lines.append(f"[yellow]the shortest median run is under {FLOOR_FACTOR}x the spawn-and-wait floor: "
                     f"its wall time is partly starting and reaping a process; give the command more "
                     f"work, or compare a metric it measures itself[/]")
    return lines


def print_report(report: dict[str, Any], console: Console) -> None:
    m = report["machine"]
    console.print(f"[bold]scxctl bench workload[/] kernel {m['kernel']}, {m['cpus_online']} CPUs"
                  f"{', ' + m['cpu_model'] if m.get('cpu_model') else ''}; "
                  + time.strftime("%Y-%m-%d %H:%M", time.localtime()))
    console.print(table(report))
    for line in notes(report):
        console.print(line)
