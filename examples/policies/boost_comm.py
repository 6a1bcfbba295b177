"""Example pyland policy that extends the built-in "deadline" policy: favour named programs.

    scxctl run pyland --policy examples/policies/boost_comm.py

Tasks whose command name (Task.comm) is in BOOSTED get a deadline one budget (20 ms) earlier than
"deadline" would give them, preempt the running task when they wake up, and get their next
wake-ups placed by BPF at once (the direct wake-up grant). Everything else is
the built-in policy, reached through super().decide().
"""

from __future__ import annotations

from scxctl.pyland.policies.deadline import DeadlinePolicy
from scxctl.pyland.policy import SCX_ENQ_WAKEUP, Decision, PolicyOptions, Task

# Task.comm is 16 bytes, NUL-padded: compare against padded names, no allocation per call.
BOOSTED = frozenset(name.ljust(16, b"\0") for name in (b"pipewire", b"Xorg", b"mpv", b"kwin_wayland"))


class BoostComm(DeadlinePolicy):
    name = "boost-comm"

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        self.bonus = options.slice_ns
        self.nr_favoured = 0

    def decide(self, task: Task, decision: Decision) -> None:
        super().decide(task, decision)
        if task.comm in BOOSTED:
            self.nr_favoured += 1
            decision.deadline = max(decision.deadline - self.bonus, 0)
            if task.flags & SCX_ENQ_WAKEUP:  # run now, and place its next wake-ups at once
                decision.preempt = decision.direct_wake = True

    def stats(self) -> dict[str, int]:
        return {**super().stats(), "favoured": self.nr_favoured}
