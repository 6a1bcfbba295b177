"""Quantiles computed the way schtest computes them, plus the summaries the report carries.

schtest feeds every sample set into a t-digest (Rust crate `tdigest` 0.2.3, `new_with_size(100)`,
`merge_unsorted`) and reads quantiles with `estimate_quantile`. Small sets are where estimators
differ most (fairness takes p10 of only 2 x CPUs values; slow wake-ups can be a handful), so this
is a line-by-line port of that estimator rather than numpy-style interpolation: our p10/p90 are
the numbers schtest would print for the same samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DIGEST_SIZE = 100


def _k_to_q(k: float, d: float) -> float:
    kd = k / d
    if kd >= 0.5:
        base = 1.0 - kd
        return 1.0 - 2.0 * base * base
    return 2.0 * kd * kd


class TDigest:
    """The merging t-digest of the `tdigest` crate 0.2.3 (one merge of sorted values)."""

    def __init__(self, values: Sequence[float], max_size: int = DIGEST_SIZE) -> None:
        vals = sorted(float(v) for v in values)
        self.count = float(len(vals))
        self.centroids: list[tuple[float, float]] = []  # (mean, weight), ascending
        if not vals:
            self.min = self.max = math.nan
            return
        self.min, self.max = vals[0], vals[-1]
        k_limit = 1.0
        q_limit_times_count = _k_to_q(k_limit, max_size) * self.count
        k_limit += 1.0
        cur_mean, cur_weight = vals[0], 1.0
        weight_so_far = 1.0
        sums_to_merge = weights_to_merge = 0.0
        for v in vals[1:]:
            weight_so_far += 1.0
            if weight_so_far <= q_limit_times_count:
                sums_to_merge += v
                weights_to_merge += 1.0
            else:
                self.centroids.append(_merged(cur_mean, cur_weight, sums_to_merge, weights_to_merge))
                sums_to_merge = weights_to_merge = 0.0
                q_limit_times_count = _k_to_q(k_limit, max_size) * self.count
                k_limit += 1.0
                cur_mean, cur_weight = v, 1.0
        self.centroids.append(_merged(cur_mean, cur_weight, sums_to_merge, weights_to_merge))
        self.centroids.sort()

    def quantile(self, q: float) -> float | None:
        """`estimate_quantile(q)`; None for an empty digest (schtest: "no p90")."""
        cs = self.centroids
        if not cs:
            return None
        rank = q * self.count
        if q > 0.5:
            if q >= 1.0:
                return self.max
            pos, t = 0, self.count
            for k in range(len(cs) - 1, -1, -1):
                t -= cs[k][1]
                if rank >= t:
                    pos = k
                    break
        else:
            if q <= 0.0:
                return self.min
            pos, t = len(cs) - 1, 0.0
            for k, (_, w) in enumerate(cs):
                if rank < t + w:
                    pos = k
                    break
                t += w
        delta, lo, hi = 0.0, self.min, self.max
        if len(cs) > 1:
            if pos == 0:
                delta = cs[1][0] - cs[0][0]
                hi = cs[1][0]
            elif pos == len(cs) - 1:
                delta = cs[pos][0] - cs[pos - 1][0]
                lo = cs[pos - 1][0]
            else:
                delta = (cs[pos + 1][0] - cs[pos - 1][0]) / 2.0
                lo, hi = cs[pos - 1][0], cs[pos + 1][0]
        value = cs[pos][0] + ((rank - t) / cs[pos][1] - 0.5) * delta
        return min(max(value, lo), hi)


def _merged(mean: float, weight: float, sums: float, weights: float) -> tuple[float, float]:
    total = weight + weights
    return ((mean * weight + sums) / total, total)


@dataclass(frozen=True)
class LatencySummary:
    """Wake latencies of one semaphore over one measurement (nanoseconds)."""

    count: int  # wake-ups sampled (the consumer really slept); may exceed the retained samples
    retained: int  # samples in the reservoir (<= 1024)
    p50_ns: float | None
    p90_ns: float | None
    p99_ns: float | None
    min_ns: int | None
    max_ns: int | None
    histogram: list[int]  # counts per log2 bucket, see HIST_EDGES_NS

    def to_json(self) -> dict[str, object]:
        return {
            "count": self.count,
            "retained": self.retained,
            "p50_ns": _round(self.p50_ns),
            "p90_ns": _round(self.p90_ns),
            "p99_ns": _round(self.p99_ns),
            "min_ns": self.min_ns,
            "max_ns": self.max_ns,
            "histogram": self.histogram,
        }


# log2 buckets from 1 us to ~1 s: bucket i holds [EDGE[i], EDGE[i+1]), the first also everything below
HIST_EDGES_NS: list[int] = [1000 * (1 << i) for i in range(21)]


def histogram(samples: Sequence[int]) -> list[int]:
    counts = [0] * len(HIST_EDGES_NS)
    for s in samples:
        i = 0 if s < HIST_EDGES_NS[1] else min(int(math.log2(s / 1000)), len(HIST_EDGES_NS) - 1)
        counts[i] += 1
    return counts


def summarize(samples: Sequence[int], seen: int) -> LatencySummary:
    d = TDigest(samples)
    return LatencySummary(
        count=seen,
        retained=len(samples),
        p50_ns=d.quantile(0.5),
        p90_ns=d.quantile(0.9),
        p99_ns=d.quantile(0.99),
        min_ns=min(samples) if samples else None,
        max_ns=max(samples) if samples else None,
        histogram=histogram(samples),
    )


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)
