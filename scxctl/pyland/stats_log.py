"""The `pyland stats` line: what `scxctl run --stats-interval` logs, and reading it back.

With `--log-format json` each line is one JSON object holding the loop's and BPF's counters at that
moment; the VM tests and the benchmarks read them from a guest's log, so the event's name and its
reader live here, next to each other (the JSON lines themselves: scxctl.log.json_events).
"""

from __future__ import annotations

from typing import Any

from scxctl.log import json_events

STATS_EVENT = "pyland stats"


def stats_lines(text: str) -> list[dict[str, Any]]:
    """The `pyland stats` events of a JSON log, oldest first."""
    return [e for e in json_events(text) if e.get("event") == STATS_EVENT]
