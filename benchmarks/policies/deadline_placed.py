"""The built-in "deadline" policy with its batch class placed by BPF instead of decided here.

    scxctl run --policy benchmarks/policies/deadline_placed.py

For benchmarks/vm_sched_compare.py: what the round trip of batch tasks' wake-ups costs and buys.
Here a batch task's wake-ups are placed at once like every other, one budget later in the
deadline order (so it waits behind the interactive tasks that woke with it), never by decide().
"""

from __future__ import annotations

from scxctl.pyland.policies.deadline import BATCH, DeadlinePolicy
from scxctl.pyland.policy import Params


class DeadlinePlaced(DeadlinePolicy):
    name = "deadline-placed"

    def class_params(self) -> dict[int, Params]:
        return {**super().class_params(), BATCH: Params(lag_ns=self.options.slice_ns, preemptible=True)}
