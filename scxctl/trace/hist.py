"""Quarter-octave latency histograms: the slot layout the BPF program fills, percentiles, log2 rows.

A delay of d ns lands in slot d for d < 4, else in 4*floor(log2 d) + the quarter of that octave d
falls in (the next two bits below the leading one). So each power of two is split into four linear
sub-buckets: percentiles interpolated inside a slot are within 25% of the true value (typically far
closer), where plain log2 buckets could be off by 2x. The terminal shows the classic log2 rows
(the four quarters summed), as bcc's runqlat does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from scxctl.units import fmt_ns

SLOTS = 256  # 4 x 64 octaves: every u64 delay has a slot
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p99_9", 0.999))


def slot_of(ns: int) -> int:
    """The slot the BPF program puts a delay of `ns` into (the same arithmetic, for tests and fakes)."""
    if ns < 4:
        return max(ns, 0)
    lg = ns.bit_length() - 1
    return 4 * lg + ((ns >> (lg - 2)) & 3)


def slot_bounds(slot: int) -> tuple[int, int]:
    """[low, high) in ns of the delays a slot holds."""
    if slot < 4:
        return slot, slot + 1
    lg, quarter = divmod(slot, 4)
    width = 1 << (lg - 2)
    low = (1 << lg) + quarter * width
    return low, low + width


@dataclass
class Histogram:
    """Counts per slot plus the exact maximum and sum the kernel kept (0 when unknown)."""

    counts: list[int] = field(default_factory=lambda: [0] * SLOTS)
    max_ns: int = 0
    sum_ns: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts)

    def add(self, ns: int, n: int = 1) -> None:
        self.counts[slot_of(ns)] += n
        self.max_ns = max(self.max_ns, ns)
        self.sum_ns += ns * n

    def minus(self, earlier: Histogram) -> Histogram:
        """The samples recorded since `earlier` (the caller supplies the interval's max)."""
        counts = [max(a - b, 0) for a, b in zip(self.counts, earlier.counts, strict=True)]
        return Histogram(counts, self.max_ns, max(self.sum_ns - earlier.sum_ns, 0))

    def merged(self, other: Histogram) -> Histogram:
        return Histogram([a + b for a, b in zip(self.counts, other.counts, strict=True)],
                         max(self.max_ns, other.max_ns), self.sum_ns + other.sum_ns)

    def percentile(self, q: float) -> float | None:
        """Estimated q-quantile in ns: linear inside the slot the rank falls in, never above max_ns."""
        total = self.total
        if total == 0:
            return None
        rank = max(q * total, 1.0)
        seen = 0
        for slot, n in enumerate(self.counts):
            if n and seen + n >= rank:
                low, high = slot_bounds(slot)
                est = low + (high - low) * (rank - seen) / n
                return min(est, float(self.max_ns)) if self.max_ns else est
            seen += n
        return float(self.max_ns) if self.max_ns else None

    def mean_ns(self) -> float | None:
        """The exact mean when the kernel summed the delays, else one from slot midpoints."""
        total = self.total
        if total == 0:
            return None
        if self.sum_ns:
            return self.sum_ns / total
        return sum(n * sum(slot_bounds(s)) / 2 for s, n in enumerate(self.counts) if n) / total

    def log2_rows(self) -> list[tuple[int, int, int]]:
        """(low ns, high ns, count) per power of two, from the first to the last non-empty one."""
        rows: list[tuple[int, int, int]] = []
        octaves = [sum(self.counts[0:2])] + [sum(self.counts[2:4])] + [
            sum(self.counts[4 * lg:4 * lg + 4]) for lg in range(2, SLOTS // 4)
        ]
        bounds = [(0, 2), (2, 4)] + [(1 << lg, 1 << (lg + 1)) for lg in range(2, SLOTS // 4)]
        used = [i for i, n in enumerate(octaves) if n]
        if not used:
            return rows
        for i in range(used[0], used[-1] + 1):
            rows.append((bounds[i][0], bounds[i][1], octaves[i]))
        return rows

    def summary(self) -> dict[str, float | int | None]:
        """count, p50..p99.9, max and mean in ns (None where there are no samples)."""
        out: dict[str, float | int | None] = {"count": self.total}
        for name, q in QUANTILES:
            v = self.percentile(q)
            out[f"{name}_ns"] = None if v is None else round(v)
        out["max_ns"] = self.max_ns if self.total else None
        mean = self.mean_ns()
        out["mean_ns"] = None if mean is None else round(mean)
        return out


def from_counts(counts: Sequence[int], max_ns: int = 0) -> Histogram:
    padded = list(counts)[:SLOTS] + [0] * max(SLOTS - len(counts), 0)
    return Histogram(padded, max_ns)




def render_rows(hist: Histogram, width: int = 40) -> list[str]:
    """runqlat-style text histogram: one line per power of two, a bar scaled to the fullest row."""
    rows = hist.log2_rows()
    if not rows:
        return ["(no samples)"]
    peak = max(n for _, _, n in rows)
    lines = []
    for low, high, n in rows:
        bar = "*" * (round(width * n / peak) if peak else 0)
        lines.append(f"{fmt_ns(low):>8} .. {fmt_ns(high):<8} {n:>10} |{bar:<{width}}|")
    return lines
