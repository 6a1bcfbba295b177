"""Numbers recognised in the output of the loads schedulers are compared on, and `--metric` ones.

Each recogniser reads a run's whole output (stdout and stderr together) and returns the metrics it
found; several can match one output. Where a tool prints intermediate reports (schbench every
interval, cyclictest without -q), the last one is the run's result. Names are `TOOL.WHAT_UNIT`;
`direction` says which way is better ("lower", "higher"), or None where neither is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from scxctl.errors import UsageError

HIGHER = "higher"
LOWER = "lower"
DIRECTIONS = (HIGHER, LOWER)


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    direction: str | None
    unit: str
    source: str  # the recogniser (schbench, hackbench, ...), or "custom" for --metric


_NUM = r"([0-9]+(?:\.[0-9]+)?)"


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 (the last match is the result)
        pass
    return found


# --- schbench (message/worker threads: wake-up and request latency percentiles, requests/s) ------

_SCHBENCH_BLOCK = re.compile(
    r"^(Wakeup|Request) Latencies percentiles \(usec\) runtime \d+ \(s\) \(\d+ total samples\)\n"
    r"((?:\t.*\n?)+)", re.M)
_SCHBENCH_PCT = re.compile(r"^\t[* ] *([0-9.]+)th: ([0-9]+)", re.M)
_SCHBENCH_RPS = re.compile(r"^average rps: " + _NUM, re.M)


def schbench(text: str) -> list[Metric]:
    out: dict[str, Metric] = {}
    for block in _SCHBENCH_BLOCK.finditer(text):  # later blocks replace earlier ones
        kind = block.group(1).lower()
        for pct in _SCHBENCH_PCT.finditer(block.group(2)):
            q = float(pct.group(1))
            if q in (50.0, 90.0, 99.0):
                name = f"schbench.{kind}_p{int(q)}_us"
                out[name] = Metric(name, float(pct.group(2)), LOWER, "us", "schbench")
    if out and (rps := _last(_SCHBENCH_RPS, text)):
        out["schbench.rps"] = Metric("schbench.rps", float(rps.group(1)), HIGHER, "requests/s", "schbench")
    return list(out.values())


# --- hackbench (rt-tests) and perf bench sched messaging: the same load, its time ---------------

_HACKBENCH = re.compile(r"^Time: " + _NUM + r"\s*$", re.M)


def hackbench(text: str) -> list[Metric]:
    m = _last(_HACKBENCH, text)
    return [Metric("hackbench.time_s", float(m.group(1)), LOWER, "s", "hackbench")] if m else []


_PERF_BENCH = re.compile(r"^# Running '(sched/messaging|sched/pipe)' benchmark:$", re.M)
_PERF_TOTAL = re.compile(r"^\s*Total time: " + _NUM + r" \[sec\]", re.M)
_PERF_OPS = re.compile(r"^\s*" + _NUM + r" ops/sec", re.M)


def perf_bench(text: str) -> list[Metric]:
    m = _last(_PERF_BENCH, text)
    if m is None:
        return []
    rest = text[m.end():]
    if m.group(1) == "sched/messaging":
        t = _PERF_TOTAL.search(rest)
        return [Metric("messaging.time_s", float(t.group(1)), LOWER, "s", "perf-bench")] if t else []
    ops = _PERF_OPS.search(rest)
    return [Metric("pipe.ops_s", float(ops.group(1)), HIGHER, "ops/s", "perf-bench")] if ops else []


# --- stress-ng --metrics: bogo ops per second (real time) of each stressor -----------------------

# "stress-ng: metrc: [PID] cpu   2917   2.01   1.99   0.00   1453.58   1469.39 ..." (older: info:)
_STRESS_ROW = re.compile(
    r"^stress-ng: (?:metrc|info): +\[\d+\] +([a-z][a-z0-9-]*) +([0-9]+) +" + _NUM + " +" + _NUM + " +"
    + _NUM + " +" + _NUM + r"\b", re.M)


def stress_ng(text: str) -> list[Metric]:
    out = {}
    for m in _STRESS_ROW.finditer(text):
        name = f"stress-ng.{m.group(1)}.bogo_ops_s"
        out[name] = Metric(name, float(m.group(6)), HIGHER, "bogo ops/s", "stress-ng")
    return list(out.values())


# --- cyclictest: per-thread min/avg/max (and p50/p90/p99 from its histogram, -h) ----------------

_CYCLIC_ROW = re.compile(
    r"^T: *([0-9]+) +\( *[0-9]+\) +P: *[0-9]+ +I: *[0-9]+ +C: *[0-9]+ +Min: *([0-9]+) +Act: *[0-9]+ +"
    r"Avg: *([0-9]+) +Max: *([0-9]+)", re.M)
_CYCLIC_HIST = re.compile(r"^# Histogram\n((?:[0-9]+(?:[ \t]+[0-9]+)+\n)+)", re.M)
_CYCLIC_SUM = re.compile(r"^# (Min|Avg|Max) Latencies: ([0-9 ]+)$", re.M)
_CYCLIC_OVER = re.compile(r"^# Histogram Overflows: ([0-9 ]+)$", re.M)
CYCLIC_PERCENTILES = (50, 90, 99)


def _cyclic(thread: int, what: str, value: float) -> Metric:
    name = f"cyclictest.T{thread}.{what}_us"
    return Metric(name, value, LOWER, "us", "cyclictest")


@dataclass(frozen=True)
class CyclicHistogram:
    """cyclictest -h's last histogram: each 1-us bucket's samples per thread, then each thread's
    overflows, the samples past its last bucket."""
    rows: tuple[tuple[int, ...], ...]  # (bucket in us, samples of thread 0, of thread 1, ...)
    overflows: tuple[int, ...]

    @property
    def threads(self) -> int:
        return len(self.rows[0]) - 1 if self.rows else 0

    def _overflows(self, thread: int) -> int:
        return self.overflows[thread] if thread < len(self.overflows) else 0

    def total(self, thread: int) -> int:
        return sum(r[thread + 1] for r in self.rows) + self._overflows(thread)

    def at_or_over(self, thread: int, us: int) -> int:
        """The thread's samples of `us` or more; the overflows count, as they lie past every bucket."""
        return sum(r[thread + 1] for r in self.rows if r[0] >= us) + self._overflows(thread)


def cyclic_histogram(text: str) -> CyclicHistogram | None:
    """The histogram of cyclictest's output (run with -h), or None where it printed none."""
    hist = _last(_CYCLIC_HIST, text)
    if hist is None:
        return None
    rows = tuple(tuple(int(x) for x in line.split()) for line in hist.group(1).splitlines())
    over = _last(_CYCLIC_OVER, text)
    overflows = tuple(int(x) for x in over.group(1).split()) if over else ()
    return CyclicHistogram(rows, overflows)


def _cyclic_percentiles(text: str) -> list[Metric]:
    """p50, p90 and p99 per thread from the histogram: 1-us buckets, then overflows past its end.

    A percentile that falls among the overflows is not known (only that it exceeds the histogram),
    so it is left out rather than reported as the histogram's end.
    """
    hist = cyclic_histogram(text)
    if hist is None:
        return []
    out = []
    for t in range(hist.threads):
        total = hist.total(t)
        if not total:
            continue
        for pct in CYCLIC_PERCENTILES:
            rank, seen = math.ceil(pct / 100 * total), 0
            for r in hist.rows:
                seen += r[t + 1]
                if seen >= rank:
                    out.append(_cyclic(t, f"p{pct}", float(r[0])))
                    break
    return out


def cyclictest(text: str) -> list[Metric]:
    out: dict[str, Metric] = {}
    for m in _CYCLIC_ROW.finditer(text):  # the last line of each thread is its result
        t = int(m.group(1))
        for what, g in (("min", 2), ("avg", 3), ("max", 4)):
            metric = _cyclic(t, what, float(m.group(g)))
            out[metric.name] = metric
    if not out:  # with -q -h, only the histogram's summary lines carry them
        for m in _CYCLIC_SUM.finditer(text):
            for t, v in enumerate(m.group(2).split()):
                metric = _cyclic(t, m.group(1).lower(), float(v))
                out[metric.name] = metric
    for metric in _cyclic_percentiles(text):
        out[metric.name] = metric
    return list(out.values())


RECOGNISERS: tuple[tuple[str, Callable[[str], list[Metric]]], ...] = (
    ("schbench", schbench),
    ("hackbench", hackbench),
    ("perf-bench", perf_bench),
    ("stress-ng", stress_ng),
    ("cyclictest", cyclictest),
)


def recognise(text: str) -> list[Metric]:
    """Every metric the known tools' output formats give for this output."""
    return [m for _, fn in RECOGNISERS for m in fn(text)]


# --- --metric NAME=REGEX[:higher|lower] -----------------------------------------------------------

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
RESERVED = ("wall_s", "cpu_s")


@dataclass(frozen=True)
class CustomMetric:
    name: str
    pattern: re.Pattern[str]
    direction: str | None

    def find(self, text: str) -> Metric | None:
        """The last match's first group (the whole match without groups) as a number."""
        m = _last(self.pattern, text)
        if m is None:
            return None
        raw = m.group(1) if self.pattern.groups else m.group(0)
        try:
            value = float(raw.replace(",", ""))
        except (TypeError, ValueError):
            return None
        return Metric(self.name, value, self.direction, "", "custom")


def parse_custom(spec: str) -> CustomMetric:
    """`NAME=REGEX`, optionally `:higher` or `:lower` at the end (else no direction)."""
    name, sep, rest = spec.partition("=")
    if not sep or not rest:
        raise UsageError(f"--metric {spec!r}: expected NAME=REGEX[:higher|lower]")
    if not _NAME.match(name):
        raise UsageError(f"--metric {spec!r}: NAME must be letters, digits, '_', '.' or '-'")
    if name in RESERVED:
        raise UsageError(f"--metric {spec!r}: {name} is always measured; choose another name")
    direction = None
    head, colon, tail = rest.rpartition(":")
    if colon and tail in DIRECTIONS:
        rest, direction = head, tail
    try:
        pattern = re.compile(rest, re.M)
    except re.error as exc:
        raise UsageError(f"--metric {name}: invalid regular expression {rest!r}: {exc}") from None
    if pattern.groups > 1:
        raise UsageError(f"--metric {name}: the expression may have one group (the number), not "
                         f"{pattern.groups}")
    return CustomMetric(name, pattern, direction)


def custom_metrics(specs: Iterable[str]) -> list[CustomMetric]:
    out: list[CustomMetric] = []
    for spec in specs:
        metric = parse_custom(spec)
        if any(m.name == metric.name for m in out):
            raise UsageError(f"--metric {metric.name} is given twice")
        out.append(metric)
    return out
