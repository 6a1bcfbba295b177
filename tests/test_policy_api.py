"""The policy API objects: slotted, reusable, options validated, optional hooks detectable."""

from __future__ import annotations

import pytest
from cheader import defines, struct_members

from scxctl.errors import ExitCode, ScxctlError
from scxctl.pyland import records
from scxctl.pyland.loop import update_values
from scxctl.pyland.options import RunOptions
from scxctl.pyland.policies import BUILTIN_POLICIES, DEFAULT_POLICY
from scxctl.pyland.policies.loader import load_policy
from scxctl.pyland.policy import (
    DECISION_FIELDS,
    NR_CLASSES,
    PARAMS_FIELDS,
    TASK_FIELDS,
    Decision,
    Params,
    Policy,
    PolicyOptions,
    Task,
    batch_end_hook,
)


def test_task_and_decision_are_slotted() -> None:
    """One Task and one Decision are reused for every record: a mistyped attribute must raise, not
    quietly become a field that the loop never reads."""
    for obj in (Task(), Decision()):
        assert not hasattr(obj, "__dict__")
        with pytest.raises(AttributeError):
            obj.extra = 1  # type: ignore[union-attr]


def test_policy_fields_are_the_c_record_members_in_c_order() -> None:
    """Task and Decision name their fields after the members of struct pyland_task and struct
    pyland_decision, in the C order (the loader reports an unset field in that order, repr prints
    it); the decision's `flags` word is one bool per PYLAND_DECISION_* flag. The C side is read from
    bpf/pyland.h, not copied here, so a member added, renamed or moved in C fails this test until
    Python follows. (tests/test_pyland_records.py ties the header to the compiled BTF and the
    struct formats.)"""
    task = tuple(struct_members("pyland_task"))
    flag_fields = [name.lower() for name in defines("PYLAND_DECISION_")]
    assert flag_fields, "bpf/pyland.h defines no PYLAND_DECISION_* flag"
    decision = tuple(
        f for m in struct_members("pyland_decision") for f in (flag_fields if m == "flags" else [m])
    )
    assert Task.__slots__ == task
    assert task == TASK_FIELDS
    assert Decision.__slots__ == decision
    assert decision == DECISION_FIELDS


def test_unset_decision_has_no_fields() -> None:
    d = Decision.unset()
    assert not any(hasattr(d, f) for f in DECISION_FIELDS)
    assert "<unset>" in repr(d)


def test_comm_text_strips_padding() -> None:
    assert Task(comm=b"stress-ng\0\0\0\0\0\0\0").comm_text == "stress-ng"


def test_options_defaults_keep_budget_and_bpf_slice_apart() -> None:
    """The budget a policy charges against is several BPF slices: a task is refilled a few times
    before the policy hears it used its budget up."""
    opts = PolicyOptions(nr_cpus=2)
    assert opts.slice_ns >= 4 * opts.min_slice_ns > 0


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


def test_builtins_load_and_scxctl_run_defaults_to_the_default_one() -> None:
    for name in BUILTIN_POLICIES:
        policy = load_policy(name, PolicyOptions(nr_cpus=2))
        assert isinstance(policy, Policy) and type(policy).steers(), name
    assert RunOptions().policy == DEFAULT_POLICY in BUILTIN_POLICIES


def test_params_are_the_c_parameters_with_the_task_s_class() -> None:
    """Params is struct pyland_params, read from bpf/pyland.h (its flags one bool each, but the CPU
    flag, which a cpu of -1 stands for; no padding), after the class and `own` of the update."""
    flags = {name.lower(): int(v, 0) for name, v in defines("PYLAND_PARAM_").items() if name != "FLAGS"}
    members = struct_members("pyland_params")
    want = ["class_id", "own"]
    for m in members:
        if m == "flags":
            want += [f for f in flags if f != "cpu"]
        elif m != "pad":
            want.append(m)
    assert Params.__slots__ == PARAMS_FIELDS == tuple(want)
    from_header = {k.upper(): v for k, v in flags.items()}
    assert from_header == {"SYNC": records.PARAM_SYNC, "CPU": records.PARAM_CPU, "FIFO": records.PARAM_FIFO,
                           "PREEMPTIBLE": records.PARAM_PREEMPTIBLE}
    assert int(defines("PYLAND_NR_")["CLASSES"]) == NR_CLASSES == records.NR_CLASSES
    assert {k: int(v) for k, v in defines("PYLAND_REC_").items()} == {
        "ENQUEUE": records.REC_ENQUEUE, "REPORT": records.REC_REPORT}
    assert struct_members("pyland_update")[:-1] == ["pid", "class_id", "own", "pad", "sent_at"]


def test_params_reset_and_pack() -> None:
    p = Params(class_id=3, own=True, slice_ns=5, lag_ns=-7, weight=200, cpu=1, sync=True, fifo=True,
               preemptible=True)
    values, saturated = update_values(42, p, 99)
    assert not saturated
    flags = records.PARAM_SYNC | records.PARAM_CPU | records.PARAM_FIFO | records.PARAM_PREEMPTIBLE
    assert values == (42, 3, 1, 0, 99, 5, -7, 200, 1, flags, 0)
    assert records.UPDATE.unpack(records.UPDATE.pack(*values)) == values
    p.reset()
    assert update_values(0, p, 0) == ((0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0), False)
    with pytest.raises(AttributeError):
        p.extra = 1  # type: ignore[attr-defined]


def test_steers_only_with_observe_or_classes() -> None:
    class Decides(Policy):
        def decide(self, task: Task, decision: Decision) -> None: ...

    class Observes(Decides):
        def observe(self, task: Task, params: Params) -> bool:
            return False

    class Classes(Decides):
        def class_params(self) -> dict[int, Params]:
            return {1: Params(sync=True)}

    assert (Decides.steers(), Observes.steers(), Classes.steers()) == (False, True, True)
    assert all(cls.steers() for cls in BUILTIN_POLICIES.values())
    p = Classes(PolicyOptions(nr_cpus=2))
    p.set_class(4, Params(weight=50))
    (got,) = p.take_class_updates()
    assert got[0] == 4 and got[1].weight == 50 and p.take_class_updates() == []
