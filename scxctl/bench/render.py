"""Terminal output of `scxctl bench`: a progress bar while measuring, then side-by-side tables."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from scxctl.bench.converge import Measurement
from scxctl.bench.stats import HIST_EDGES_NS
from scxctl.units import fmt_ns

_BARS = "▁▂▃▄▅▆▇█"
_STATUS_STYLE = {
    "pass": "bold green",
    "fail": "bold red",
    "unreliable": "bold yellow",
    "invalid": "bold magenta",
    "error": "bold red",
}



def fmt_metric(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def sparkline(hist: list[int]) -> str:
    """Log2 latency histogram as `LOW ▁▃█▂ HIGH` over its non-empty range (each bar doubles)."""
    idx = [i for i, c in enumerate(hist) if c]
    if not idx:
        return "(no samples)"
    lo, hi = idx[0], idx[-1]
    peak = max(hist)
    bars = "".join(
        " " if hist[i] == 0 else _BARS[min(len(_BARS) - 1, (hist[i] * len(_BARS) - 1) // peak)]
        for i in range(lo, hi + 1)
    )
    upper = HIST_EDGES_NS[hi + 1] if hi + 1 < len(HIST_EDGES_NS) else None
    return f"{fmt_ns(HIST_EDGES_NS[lo]) if lo else '0'} {bars} {fmt_ns(upper) if upper else '∞'}"


class LiveProgress:
    """Progress bar of the current measurement (elapsed vs. predicted from the previous one)."""

    def __init__(self, console: Console, enabled: bool, log_measurements: bool) -> None:
        self.console = console
        self.enabled = enabled
        self.log_measurements = log_measurements
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            auto_refresh=False,
            disable=not enabled,
        )
        self.task: TaskID | None = None
        self.label = ""
        self.round_start = 0.0
        self.expected = 1.0
        self.per_iter: float | None = None
        self.last_refresh = 0.0

    def begin_test(self, scheduler: str, test: str) -> None:
        self.label = f"{scheduler} · {test}"
        self.per_iter = None
        if self.enabled:
            self.progress.start()
            self.task = self.progress.add_task(self.label, total=1.0, note="harness overhead")
            self.progress.refresh()

    def end_test(self, result: dict[str, Any]) -> None:
        self.close()

    def close(self) -> None:
        """Stop the bar if it runs (also on Ctrl-C); never prints anything when it did not run."""
        if self.task is not None:
            self.progress.stop()
            self.progress.remove_task(self.task)
            self.task = None

    def on_start(self, index: int, iters: int) -> None:
        self.round_start = time.monotonic()
        self.expected = max(self.per_iter * iters, 0.05) if self.per_iter else 1.0
        if self.task is not None:
            self.progress.update(
                self.task, total=self.expected, completed=0, note=f"measurement {index + 1}, iters={iters}"
            )
            self.progress.refresh()

    def on_done(self, m: Measurement) -> None:
        self.per_iter = m.elapsed_s / m.iters
        if self.log_measurements:
            counted = "" if m.counted else " (shorter than min-time: not counted)"
            self.console.print(
                f"[dim]{self.label}: converge: iters={m.iters}, elapsed={m.elapsed_s:.2f}, "
                f"metric={fmt_metric(m.metric)}{counted}[/dim]"
            )

    def heartbeat(self) -> None:
        now = time.monotonic()
        if self.task is None or now - self.last_refresh < 0.1:
            return
        self.last_refresh = now
        done = now - self.round_start
        self.progress.update(self.task, total=max(self.expected, done), completed=done)
        self.progress.refresh()


def _runs_with(report: dict[str, Any], test: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    out = []
    for run in report["runs"]:
        match = next((t for t in run["tests"] if t["test"] == test), None)
        out.append((run, match))
    return out


def _status_cell(t: dict[str, Any] | None, run: dict[str, Any]) -> str:
    if t is None:
        return "[magenta]not run[/]" + (" (scheduler left)" if not run["valid"] else "")
    style = _STATUS_STYLE.get(t["status"], "")
    text = f"[{style}]{t['status'].upper()}[/]"
    if t["status"] == "unreliable" and t["pass"] is not None:
        text += f" (would {'pass' if t['pass'] else 'fail'})"
    return text


def _counted(t: dict[str, Any]) -> str:
    parts = [
        f"{fmt_metric(m['metric'])} ({m['iters']} it, {m['elapsed_s']:.1f}s)"
        for m in t["measurements"]
        if m["counted"]
    ]
    return "\n".join(parts) or "-"


def _lat(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    return f"{fmt_ns(d['p50_ns'])} / {fmt_ns(d['p90_ns'])} / {fmt_ns(d['p99_ns'])}"


def test_table(report: dict[str, Any], test: str) -> Table:
    cols = _runs_with(report, test)
    first = next((t for _, t in cols if t), None)
    rule = f"pass if metric {first['direction']} {first['threshold']:.2f}" if first else ""
    table = Table(title=f"{test} ({rule})", show_lines=True, expand=False)
    table.add_column("", style="bold", no_wrap=True)
    for run, _ in cols:
        table.add_column(run["scheduler"]["name"])

    def row(label: str, fn: Any) -> None:
        table.add_row(label, *[(fn(t) if t else "-") for _, t in cols])

    table.add_row("result", *[_status_cell(t, run) for run, t in cols])
    row("metric (final)", lambda t: fmt_metric(t["metric"]))
    row("counted measurements", _counted)
    if test == "adaptive_priority":
        for side in ("fast", "slow"):
            row(f"{side} wake p50/p90/p99", lambda t, s=side: _lat((t["final"] or {}).get(s)))
            row(
                f"{side} wake samples",
                lambda t, s=side: (
                    str((t["final"] or {}).get(s, {}).get("count", "-"))
                    + (
                        " [yellow](< 20: UNRELIABLE)[/]"
                        if (t["final"] or {}).get(s, {}).get("count", 99) < 20
                        else ""
                    )
                ),
            )
            row(
                f"{side} wake histogram",
                lambda t, s=side: sparkline(((t["final"] or {}).get(s) or {}).get("histogram", [])),
            )
            if any(t and t.get("vs_default") for _, t in cols):
                row(f"{side} wake p50/p90/p99 vs default", lambda t, s=side: _vs_default(t, s))
            if any(t and (t["final"] or {}).get("trace") for _, t in cols):
                row(f"{side} kernel wake->run p50/p90/p99", lambda t, s=side: _traced(t, s))
    else:
        row(
            "CPU time min/p10/mean/max",
            lambda t: " / ".join(
                "-" if v is None else f"{v:.2f}s"
                for v in ((t["final"] or {}).get("cpu_time_s") or {}).values()
            ),
        )
        row("per-process CPU time", lambda t: _process_bars(t["final"]))
    row("harness floor p50/p90", lambda t: _floor(t["overhead"]))
    row(
        "harness floor histogram",
        lambda t: sparkline(t["overhead"]["wake"]["histogram"]) if t["overhead"] else "-",
    )
    row("note", lambda t: t["error"] or "")
    return table


def _vs_default(t: dict[str, Any], side: str) -> str:
    ratios = (t.get("vs_default") or {}).get(side)
    if not ratios:
        return "-"
    return " / ".join("-" if ratios[q] is None else f"{ratios[q]:.2f}x" for q in ("p50", "p90", "p99"))


def _traced(t: dict[str, Any], side: str) -> str:
    """The kernel's measurement of the same worker (bench --trace), with its sample count."""
    d = ((t["final"] or {}).get("trace") or {}).get(side)
    return f"{_lat(d)} (n={d['count']}, max {fmt_ns(d['max_ns'])})" if d else "-"


def _floor(o: dict[str, Any] | None) -> str:
    if not o:
        return "-"
    w = o["wake"]
    return f"{fmt_ns(w['p50_ns'])} / {fmt_ns(w['p90_ns'])} (n={w['count']})"


def _process_bars(final: dict[str, Any] | None) -> str:
    if not final or not final.get("processes"):
        return "-"
    times = [p["cpu_time_s"] for p in final["processes"]]
    peak = max(times) or 1.0
    pinned = "".join(
        _BARS[min(7, int(p["cpu_time_s"] / peak * 7.999))]
        for p in final["processes"]
        if p["pinned_cpu"] is not None
    )
    floating = "".join(
        _BARS[min(7, int(p["cpu_time_s"] / peak * 7.999))]
        for p in final["processes"]
        if p["pinned_cpu"] is None
    )
    return f"pinned {pinned}  unpinned {floating}"


def print_report(report: dict[str, Any], console: Console) -> None:
    m = report["machine"]
    console.print(
        f"[bold]scxctl bench[/] kernel {m['kernel']}, {m['cpus_online']} CPUs"
        f"{', ' + m['cpu_model'] if m.get('cpu_model') else ''}; "
        f"min-time {report['options']['min_time_s']:g} s, max-time {report['options']['max_time_s']:g} s"
    )
    for run in report["runs"]:
        if not run["valid"]:
            console.print(f"[bold magenta]INVALID[/] {run['scheduler']['name']}: {run['invalid_reason']}")
    for test in report["options"]["tests"]:
        console.print(test_table(report, test))


def quiet_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for run in report["runs"]:
        for t in run["tests"]:
            extra = ""
            if t["test"] == "adaptive_priority" and t["final"]:
                f = t["final"]
                extra = (
                    f" fast p90 {fmt_ns(f['fast']['p90_ns'])} (n={f['fast']['count']})"
                    f" slow p90 {fmt_ns(f['slow']['p90_ns'])} (n={f['slow']['count']})"
                )
            lines.append(
                f"{t['test']} {run['scheduler']['name']}: {t['status'].upper()}"
                f" metric={fmt_metric(t['metric'])} ({t['direction']} {t['threshold']:.2f}){extra}"
            )
    return lines
