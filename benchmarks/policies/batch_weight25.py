"""The deadline policy with its batch class placed by BPF at weight 25 (nice 0 is 100): a smaller share
and later deadlines in place of the round trip per wake-up (docs/scheduler-comparison.md)."""

from scxctl.pyland.policies.deadline import BATCH, INTERACTIVE, DeadlinePolicy
from scxctl.pyland.policy import Params


class BatchWeight25(DeadlinePolicy):
    name = "batch-weight25"

    def class_params(self) -> dict[int, Params]:
        return {INTERACTIVE: Params(), BATCH: Params(preemptible=True, weight=25)}
