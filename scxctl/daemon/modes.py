"""Mode names (the ones scx_loader users know) and what each means for pyland.

A mode is a named intent; for pyland it becomes command-line options of `scxctl run pyland`, for
an external scheduler the per-mode argument list from the config.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Mode(enum.StrEnum):
    auto = "auto"
    gaming = "gaming"
    powersave = "powersave"
    lowlatency = "lowlatency"
    server = "server"


@dataclass(frozen=True)
class PylandOptions:
    """The options of `scxctl run pyland` a mode sets; None leaves pyland's own default.

    slice_us is pyland's user-space budget (deadline/vruntime scale), slice_min_us the BPF slice a
    task gets each time it is dispatched.
    """

    policy: str = "deadline"
    builtin_idle: bool = True
    slice_us: int | None = None
    slice_min_us: int | None = None
    why: str = ""

    def argv(self, policy: str | None = None) -> list[str]:
        args = ["--policy", policy or self.policy]
        args.append("--builtin-idle" if self.builtin_idle else "--no-builtin-idle")
        if self.slice_us is not None:
            args += ["--slice-us", str(self.slice_us)]
        if self.slice_min_us is not None:
            args += ["--slice-min-us", str(self.slice_min_us)]
        return args


PYLAND_MODES: dict[Mode, PylandOptions] = {
    Mode.auto: PylandOptions(why="pyland defaults: deadline policy, 20 ms budget, 3 ms slices"),
    Mode.gaming: PylandOptions(
        slice_us=5000, slice_min_us=500, why="short slices: interactive threads run sooner"
    ),
    Mode.lowlatency: PylandOptions(
        slice_us=2000, slice_min_us=250, why="shortest slices: lowest latency, more switches"
    ),
    Mode.powersave: PylandOptions(
        builtin_idle=False,
        slice_us=40000,
        slice_min_us=5000,
        why="long slices, no spreading to idle CPUs: fewer wake-ups",
    ),
    Mode.server: PylandOptions(
        slice_us=40000, slice_min_us=4000, why="long slices: throughput, fewer switches"
    ),
}

BUILTIN_POLICIES = ("deadline", "fifo")


def parse_mode(name: str) -> Mode:
    """The Mode for `name`; ValueError names the valid ones."""
    try:
        return Mode(name)
    except ValueError:
        raise ValueError(f"unknown mode {name!r} (modes: {', '.join(m.value for m in Mode)})") from None
