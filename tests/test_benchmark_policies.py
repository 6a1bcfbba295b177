"""The policy variants benchmarks/vm_sched_compare.py measures load and validate as `scxctl run
--policy FILE` would load them, and differ from the built-in policy only where they say."""

from __future__ import annotations

from pathlib import Path

import pytest

from scxctl.pyland.policies.deadline import BATCH, INTERACTIVE, DeadlinePolicy
from scxctl.pyland.policies.loader import load_policy
from scxctl.pyland.policy import PolicyOptions

POLICIES = Path(__file__).resolve().parents[1] / "benchmarks" / "policies"
OPTS = PolicyOptions(nr_cpus=2)


@pytest.mark.parametrize(
    ("name", "lag_ns", "weight"),
    [("batch_placed.py", 0, 0), ("batch_lag.py", OPTS.slice_ns, 0), ("batch_weight25.py", 0, 25),
     ("batch_weight10.py", 0, 10)],
)
def test_the_batch_class_is_placed_by_bpf(name: str, lag_ns: int, weight: int) -> None:
    policy = load_policy(str(POLICIES / name), OPTS)
    classes, builtin = policy.class_params(), DeadlinePolicy(OPTS).class_params()
    assert builtin[BATCH].sync is True  # what the variant changes
    assert classes[BATCH].sync is False and classes[BATCH].preemptible is True
    assert (classes[BATCH].lag_ns, classes[BATCH].weight) == (lag_ns, weight)
    assert vars_of(classes[INTERACTIVE]) == vars_of(builtin[INTERACTIVE])


def vars_of(params: object) -> dict[str, object]:
    return {k: getattr(params, k) for k in params.__slots__}  # type: ignore[attr-defined]
