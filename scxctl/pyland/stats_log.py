"""The `pyland stats` line: what `scxctl run --stats-interval` logs, and reading it back.

With `--log-format json` each line is one JSON object holding the loop's and BPF's counters at that
moment; the VM tests and the benchmarks read them from a guest's log, so the event's name and the
parsing live here, next to each other.
"""

from __future__ import annotations

import json
from typing import Any

STATS_EVENT = "pyland stats"


def stats_lines(text: str) -> list[dict[str, Any]]:
    """The `pyland stats` events of a JSON log, oldest first. Plain output, other events and a line
    cut short (a log read while it is written) are skipped."""
    out = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == STATS_EVENT:
            out.append(event)
    return out
