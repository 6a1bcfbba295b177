"""schtest's convergence loop, minus its quirk of returning 0.0 when max-time is exceeded.

iters starts at 1 and is rescaled (ceil(iters * min / elapsed), at least +1, at most x100) until one
measurement lasts at least `min_time`; from then on it doubles, and the loop ends after the first
measurement that lasts longer than `max_time`. Measurements shorter than `min_time` are kept but
marked `counted = False`. The test's result is the last counted measurement, reported with its real
metric (schtest would report 0.0 here), and every measurement is reported.

schtest also stops early once its metric crosses the threshold in the "good" direction; that rule
is written for higher-is-better metrics and fires wrongly for adaptive_priority's lower-is-better
ratio, so (as our spec says) we always run to max-time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Measurement:
    iters: int
    elapsed_s: float
    counted: bool
    metric: float | None  # None when it cannot be computed (e.g. no slow wake-up was sampled)
    detail: dict[str, Any] = field(default_factory=dict)  # test-specific figures (JSON-ready)

    def to_json(self) -> dict[str, Any]:
        return {
            "iters": self.iters,
            "elapsed_s": round(self.elapsed_s, 4),
            "counted": self.counted,
            "metric": None if self.metric is None else round(self.metric, 4),
            **self.detail,
        }


MeasureFn = Callable[[int], tuple[float | None, dict[str, Any]]]


def next_iters(iters: int, elapsed_s: float, min_time: float, max_time: float) -> int | None:
    """The iteration count after a measurement of `elapsed_s`, or None when converged."""
    if elapsed_s > max_time:
        return None
    if elapsed_s < min_time:
        if elapsed_s <= 0:
            return iters * 100
        scaled = math.ceil(iters * min_time / elapsed_s)
        return min(max(scaled, iters + 1), iters * 100)
    return iters * 2


def converge(
    measure: MeasureFn,
    min_time: float,
    max_time: float,
    out: list[Measurement],
    on_start: Callable[[int, int], None] | None = None,
    on_done: Callable[[Measurement], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Measurement:
    """Run `measure(iters)` until converged; appends every measurement to `out` as it completes
    (so a caller that catches an exception still has the partial history) and returns the final one.
    """
    iters: int | None = 1
    while iters is not None:
        if on_start is not None:
            on_start(len(out), iters)
        t0 = clock()
        metric, detail = measure(iters)
        elapsed = clock() - t0
        out.append(Measurement(iters, elapsed, elapsed >= min_time, metric, detail))
        if on_done is not None:
            on_done(out[-1])
        iters = next_iters(iters, elapsed, min_time, max_time)
    return out[-1]


def final(measurements: list[Measurement]) -> Measurement | None:
    counted = [m for m in measurements if m.counted]
    return counted[-1] if counted else None
