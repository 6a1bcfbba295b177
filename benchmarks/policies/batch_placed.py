"""The deadline policy with its batch class placed by BPF: no round trip per wake-up.

For benchmarks/vm_sched_compare.py (docs/scheduler-comparison.md): what the batch class's `sync`
buys and costs, measured against the built-in policy in the same boot.
"""

from scxctl.pyland.policies.deadline import BATCH, INTERACTIVE, DeadlinePolicy
from scxctl.pyland.policy import Params


class BatchPlaced(DeadlinePolicy):
    name = "batch-placed"

    def class_params(self) -> dict[int, Params]:
        return {INTERACTIVE: Params(), BATCH: Params(preemptible=True)}
