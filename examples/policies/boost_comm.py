"""Example pyland policy that extends the built-in "deadline" policy: favour named programs.

    scxctl run pyland --policy examples/policies/boost_comm.py

Tasks whose command name (Task.comm) is in BOOSTED go to a class of their own whose deadlines are
one budget (20 ms) earlier than "deadline" would give them: they win every tie with other tasks and
preempt them when they wake (steer mode). In round-trip mode (--round-trip), decide() moves their
deadline instead, preempts for them and grants them direct wake-ups. Everything else is the built-in
policy, reached through super().
"""

from __future__ import annotations

from scxctl.pyland.policies.deadline import DeadlinePolicy
from scxctl.pyland.policy import SCX_ENQ_WAKEUP, Decision, Params, PolicyOptions, Task

# Task.comm is 16 bytes, NUL-padded: compare against padded names, no allocation per call.
BOOSTED = frozenset(name.ljust(16, b"\0") for name in (b"pipewire", b"Xorg", b"mpv", b"kwin_wayland"))
BOOST = 2  # the class of the favoured (deadline uses 0 and 1)


class BoostComm(DeadlinePolicy):
    name = "boost-comm"

    def __init__(self, options: PolicyOptions) -> None:
        super().__init__(options)
        self.bonus = options.slice_ns
        self.nr_favoured = 0

    def class_params(self) -> dict[int, Params]:
        return {**super().class_params(), BOOST: Params(lag_ns=-self.bonus)}

    def observe(self, task: Task, params: Params) -> bool:
        if task.comm not in BOOSTED:
            return super().observe(task, params)
        if task.class_id == BOOST:  # BPF has it already
            return False
        self.nr_favoured += 1
        params.class_id = BOOST
        return True

    def decide(self, task: Task, decision: Decision) -> None:
        super().decide(task, decision)
        if task.comm in BOOSTED:
            self.nr_favoured += 1
            decision.deadline = max(decision.deadline - self.bonus, 0)
            if task.flags & SCX_ENQ_WAKEUP:  # run now, and place its next wake-ups at once
                decision.preempt = decision.direct_wake = True

    def stats(self) -> dict[str, int]:
        return {**super().stats(), "favoured": self.nr_favoured}
