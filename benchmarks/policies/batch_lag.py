"""The deadline policy with its batch class placed by BPF one budget behind: a deadline offset in
place of the round trip per wake-up (docs/scheduler-comparison.md)."""

from scxctl.pyland.policies.deadline import BATCH, INTERACTIVE, DeadlinePolicy
from scxctl.pyland.policy import Params


class BatchLag(DeadlinePolicy):
    name = "batch-lag"

    def class_params(self) -> dict[int, Params]:
        return {INTERACTIVE: Params(), BATCH: Params(preemptible=True, lag_ns=self.options.slice_ns)}
