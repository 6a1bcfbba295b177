"""What a test needs from the run around it: partial mode, progress hooks, a scheduler health check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _noop(*_: Any) -> None:
    return None


@dataclass
class Env:
    sched_ext: bool = False  # workload processes switch to SCHED_EXT (the scheduler runs in partial mode)
    heartbeat: Callable[[], None] = _noop  # progress refresh, ~10x/s while a round runs
    health: Callable[[], None] = _noop  # raises when the scheduler under test is gone
    on_start: Callable[[int, int], None] = _noop  # (measurement index, iters) before each measurement
    on_done: Callable[[Any], None] = _noop  # (Measurement) after each one
    round_timeout_s: float = 120.0  # one round longer than this means a starved or stuck workload
    worker: Path | None = None  # the native worker, resolved before any scheduler starts

    def tick(self) -> None:
        self.heartbeat()
        self.health()
