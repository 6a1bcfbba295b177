"""The policy API objects: slotted, reusable, options validated, optional hooks detectable."""

from __future__ import annotations

import pytest

from scxctl.errors import ExitCode, ScxctlError
from scxctl.pyland.policies import BUILTIN_POLICIES, DEFAULT_POLICY
from scxctl.pyland.policy import (
    DECISION_FIELDS,
    TASK_FIELDS,
    Decision,
    Policy,
    PolicyOptions,
    Task,
    batch_end_hook,
)


def test_task_and_decision_are_slotted_with_the_record_fields() -> None:
    assert Task.__slots__ == TASK_FIELDS
    assert Decision.__slots__ == DECISION_FIELDS
    assert TASK_FIELDS == (
        "pid", "cpu", "nr_cpus_allowed", "flags", "start_ts", "stop_ts",
        "exec_runtime", "weight", "vtime", "enq_cnt", "comm",
    )  # fmt: skip
    assert DECISION_FIELDS == ("pid", "cpu", "preempt", "slice_ns", "deadline", "vtime", "enq_cnt")
    with pytest.raises(AttributeError):
        Task().extra = 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        Decision().extra = 1  # type: ignore[attr-defined]


def test_unset_decision_has_no_fields() -> None:
    d = Decision.unset()
    assert not any(hasattr(d, f) for f in DECISION_FIELDS)
    assert "<unset>" in repr(d)


def test_comm_text_strips_padding() -> None:
    assert Task(comm=b"stress-ng\0\0\0\0\0\0\0").comm_text == "stress-ng"


def test_options_defaults_keep_budget_and_bpf_slice_apart() -> None:
    opts = PolicyOptions(nr_cpus=2)
    assert (opts.slice_ns, opts.min_slice_ns, opts.builtin_idle) == (20_000_000, 1_000_000, True)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"nr_cpus": 0}, "nr_cpus"),
        ({"nr_cpus": 2, "min_slice_ns": 10}, "minimum slice"),
        ({"nr_cpus": 2, "slice_ns": 500_000}, "must not be below"),
    ],
)
def test_bad_options_are_usage_errors(kwargs: dict[str, int], words: str) -> None:
    with pytest.raises(ScxctlError) as info:
        PolicyOptions(**kwargs)
    assert info.value.code == ExitCode.USAGE
    assert words in info.value.message


def test_subclass_name_defaults_to_class_name_not_parents() -> None:
    class Mine(BUILTIN_POLICIES["deadline"]):  # type: ignore[misc, valid-type]
        pass

    assert Mine.name == "Mine"
    assert BUILTIN_POLICIES["deadline"].name == "deadline"


def test_batch_end_hook_only_when_overridden() -> None:
    class Plain(Policy):
        def decide(self, task: Task, decision: Decision) -> None:
            pass

    class Hooked(Plain):
        def __init__(self, options: PolicyOptions) -> None:
            super().__init__(options)
            self.seen: list[int] = []

        def on_batch_end(self, now_ns: int) -> None:
            self.seen.append(now_ns)

    opts = PolicyOptions(nr_cpus=1)
    assert batch_end_hook(Plain(opts)) is None
    hooked = Hooked(opts)
    hook = batch_end_hook(hooked)
    assert hook is not None
    hook(5)
    assert hooked.seen == [5]


def test_builtins() -> None:
    assert sorted(BUILTIN_POLICIES) == ["deadline", "fifo"]
    assert DEFAULT_POLICY == "deadline"
