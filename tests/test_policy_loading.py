"""load_policy: built-in names, policy files, and every failure as a one-line USAGE error."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from scxctl.errors import ExitCode, ScxctlError
from scxctl.pyland.policies import DeadlinePolicy, FifoPolicy
from scxctl.pyland.policies.emulate import EmulatedTask, enqueue
from scxctl.pyland.policies.loader import check_decision, load_policy, validation_tasks
from scxctl.pyland.policy import (
    NICE0_WEIGHT,
    PYLAND_CPU_ANY,
    SCX_ENQ_WAKEUP,
    Decision,
    Params,
    Policy,
    PolicyOptions,
    Task,
)
from scxctl.pyland.records import REC_ENQUEUE, REC_REPORT

OPTS = PolicyOptions(nr_cpus=2)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "policies"

HEADER = "from scxctl.pyland.policy import Policy\n"
GOOD_DECIDE = """
    def decide(self, task, d):
        d.pid = task.pid
        d.cpu = -1
        d.preempt = False
        d.direct_wake = False
        d.slice_ns = 0
        d.deadline = 1
        d.vtime = task.vtime
        d.enq_cnt = task.enq_cnt
"""


def write(tmp_path: Path, body: str, name: str = "mine.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def usage_error(spec: str) -> str:
    with pytest.raises(ScxctlError) as info:
        load_policy(spec, OPTS)
    assert info.value.code == ExitCode.USAGE
    message = info.value.message
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name, cls", [("deadline", DeadlinePolicy), ("fifo", FifoPolicy)])
def test_builtin_by_name(name: str, cls: type[Policy]) -> None:
    policy = load_policy(name, OPTS)
    assert type(policy) is cls
    assert policy.options is OPTS


def test_returned_instance_has_seen_no_validation_task() -> None:
    assert load_policy("fifo", OPTS).stats() == {"decisions": 0}
    assert load_policy("deadline", OPTS).stats()["burst_slot_takeovers"] == 0


def test_good_file_loads(tmp_path: Path) -> None:
    spec = write(tmp_path, HEADER + "class Mine(Policy):\n    name = 'mine'\n" + GOOD_DECIDE)
    policy = load_policy(spec, OPTS)
    assert type(policy).__name__ == "Mine"
    assert policy.name == "mine"


def test_unknown_builtin() -> None:
    message = usage_error("turbo")
    assert message.startswith("policy turbo: unknown policy")
    assert "deadline, fifo" in message


def test_missing_file(tmp_path: Path) -> None:
    spec = str(tmp_path / "absent.py")
    assert usage_error(spec) == f"policy file {spec}: file not found"


def test_directory_is_not_a_policy(tmp_path: Path) -> None:
    (tmp_path / "dir.py").mkdir()
    assert usage_error(str(tmp_path / "dir.py")).endswith("not a regular file")


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    spec = write(tmp_path, HEADER + "\nclass Mine(Policy)\n    pass\n")
    message = usage_error(spec)
    assert message.startswith(f"policy file {spec}: syntax error at line 3")


def test_import_error(tmp_path: Path) -> None:
    spec = write(tmp_path, "import scxctl_no_such_module_xyz\n")
    message = usage_error(spec)
    assert "import failed: ModuleNotFoundError" in message
    assert "scxctl_no_such_module_xyz" in message
    assert "(line 1)" in message
    assert not any("scxctl_user_policy" in m and "mine" in m for m in sys.modules)


def test_module_raising_at_import(tmp_path: Path) -> None:
    spec = write(tmp_path, "x = 1\nraise RuntimeError('boom')\n")
    assert usage_error(spec).endswith("module raised RuntimeError: boom (line 2)")


def test_no_policy_subclass(tmp_path: Path) -> None:
    spec = write(tmp_path, HEADER + "class NotAPolicy:\n    pass\n")
    assert "defines no subclass of scxctl.pyland.policy.Policy" in usage_error(spec)


def test_imported_builtin_alone_is_not_a_definition(tmp_path: Path) -> None:
    spec = write(tmp_path, "from scxctl.pyland.policies.deadline import DeadlinePolicy\n")
    assert "defines no subclass" in usage_error(spec)


def test_several_subclasses_without_policy(tmp_path: Path) -> None:
    body = HEADER + "class A(Policy):\n" + GOOD_DECIDE + "class B(Policy):\n" + GOOD_DECIDE
    message = usage_error(write(tmp_path, body))
    assert "several Policy subclasses (A, B)" in message
    assert "POLICY = <class>" in message


def test_several_subclasses_with_policy_selects_one(tmp_path: Path) -> None:
    body = HEADER + "class A(Policy):\n" + GOOD_DECIDE + "class B(A):\n    name = 'bee'\nPOLICY = B\n"
    assert load_policy(write(tmp_path, body), OPTS).name == "bee"


def test_policy_variable_must_be_a_policy_class(tmp_path: Path) -> None:
    body = HEADER + "class A(Policy):\n" + GOOD_DECIDE + "POLICY = A(None)\n"
    assert "POLICY must be a subclass of Policy" in usage_error(write(tmp_path, body))


def test_decide_not_defined(tmp_path: Path) -> None:
    spec = write(tmp_path, HEADER + "class Lazy(Policy):\n    pass\n")
    assert usage_error(spec).endswith("Lazy does not define decide(self, task, decision)")


def test_constructor_raising(tmp_path: Path) -> None:
    body = (
        HEADER
        + (
            "class Mine(Policy):\n"
            "    def __init__(self, options):\n"
            "        raise ValueError('needs 64 CPUs')\n"
        )
        + GOOD_DECIDE
    )
    message = usage_error(write(tmp_path, body))
    assert message.endswith("Mine(options) raised ValueError: needs 64 CPUs (line 4)")


def test_decide_raising(tmp_path: Path) -> None:
    body = HEADER + "class Mine(Policy):\n    def decide(self, task, d):\n        1 // 0\n"
    message = usage_error(write(tmp_path, body))
    assert "decide() raised ZeroDivisionError: integer division or modulo by zero (line 4)" in message


def test_decide_raising_only_on_a_pinned_task(tmp_path: Path) -> None:
    check = "        assert task.nr_cpus_allowed > 1, 'pinned'\n"
    body = HEADER + "class Mine(Policy):\n" + GOOD_DECIDE + check
    assert "decide() raised AssertionError: pinned" in usage_error(write(tmp_path, body))


@pytest.mark.parametrize(
    "change, expected",
    [
        ("del d.deadline", "decide() left Decision.deadline unset"),
        ("del d.enq_cnt", "decide() left Decision.enq_cnt unset"),
        ("d.preempt = 1", "set Decision.preempt to 1; it must be True or False"),
        ("d.direct_wake = None", "set Decision.direct_wake to None; it must be True or False"),
        ("d.slice_ns = 1.5e6", "set Decision.slice_ns to 1500000.0 (float); it must be an int"),
        ("d.deadline = True", "set Decision.deadline to True (bool); it must be an int"),
        ("d.cpu = None", "set Decision.cpu to None (NoneType); it must be an int"),
        ("d.cpu = 2", "set Decision.cpu to 2; it must be -1 (any) or 0..1"),
        ("d.cpu = -2", "set Decision.cpu to -2"),
        ("d.pid = 0", "it must echo Task.pid"),
        ("d.enq_cnt = 0", "it must echo Task.enq_cnt"),
        ("d.vtime = -1", "set Decision.vtime to -1; it must fit an unsigned 64-bit integer"),
        ("d.deadline = 1 << 64", "it must fit an unsigned 64-bit integer"),
        ("d.cpu = 1 - task.cpu if task.nr_cpus_allowed == 1 else -1", "sent a task pinned to CPU 1 to CPU 0"),
    ],
)
def test_bad_decisions(tmp_path: Path, change: str, expected: str) -> None:
    body = HEADER + "class Mine(Policy):\n" + GOOD_DECIDE + f"        {change}\n"
    message = usage_error(write(tmp_path, body))
    assert message.startswith(f"policy file {tmp_path / 'mine.py'}: decide() ")
    assert expected in message
    assert "(validation task validate-" in message


@pytest.mark.parametrize(
    "method, expected",
    [
        ("def observe(self, task, params):\n        return None",
         "observe() returned None; it must return True or False"),
        ("def observe(self, task, params):\n        params.weight = 1.5\n        return True",
         "observe() set Params.weight to 1.5 (float); it must be an int (validation task validate-"),
        ("def observe(self, task, params):\n        params.sync = 1\n        return True",
         "observe() set Params.sync to 1; it must be True or False"),
        ("def observe(self, task, params):\n        return 1 / 0",
         "observe() raised ZeroDivisionError: division by zero (line"),
        ("def class_params(self):\n        return [Params()]",
         "class_params() returned [Params("),
        ("def class_params(self):\n        return {'1': Params()}",
         "class_params() has a key that is not an int (class '1')"),
        ("def class_params(self):\n        return {1: None}",
         "class_params() gave None; it must be a Params (class 1)"),
    ],
)
def test_bad_steering(tmp_path: Path, method: str, expected: str) -> None:
    body = ("from scxctl.pyland.policy import Params, Policy\n" + "class Mine(Policy):\n" + GOOD_DECIDE
            + "\n    " + method + "\n")
    message = usage_error(write(tmp_path, body))
    assert expected in message, message


def test_out_of_range_params_pass_validation(tmp_path: Path) -> None:
    """Values out of range are BPF's to clamp (and count): only their type is validated."""
    body = ("from scxctl.pyland.policy import Params, Policy\n" + "class Mine(Policy):\n" + GOOD_DECIDE
            + "\n    def observe(self, task, params):\n        params.weight = -5\n"
            "        params.cpu = 1 << 40\n        params.class_id = 999\n        return True\n")
    assert load_policy(write(tmp_path, body), OPTS).steers()


def reports(policy: Policy, task: Task) -> Params | None:
    task.kind = REC_REPORT
    params = Params()
    return params if policy.observe(task, params) else None


def test_example_classify_by_name_cgroup_and_behaviour() -> None:
    policy = load_policy(str(EXAMPLES / "classify.py"), OPTS)
    xorg = reports(policy, Task(pid=1, comm=b"Xorg".ljust(16, b"\0"), nr_wakeups=50, run_ns=5_000_000))
    hog = reports(policy, Task(pid=2, comm=b"make", nr_wakeups=0, run_ns=90_000_000))
    quiet = reports(policy, Task(pid=3, comm=b"bash", nr_wakeups=3, run_ns=1_000_000))
    assert xorg is not None and hog is not None and quiet is None
    classes = policy.class_params()
    assert classes[xorg.class_id].lag_ns < 0 and classes[xorg.class_id].slice_ns == 1_000_000
    assert classes[hog.class_id].sync is True and classes[hog.class_id].weight == 25
    assert reports(policy, Task(pid=2, comm=b"make", nr_wakeups=0, run_ns=90_000_000,
                                class_id=hog.class_id)) is None  # BPF has it: nothing sent
    # its (sync) wake-up comes to observe() first, counting that one wake-up: still a hog
    woke = Task(pid=2, comm=b"make", nr_wakeups=1, run_ns=90_000_000, class_id=hog.class_id,
                flags=SCX_ENQ_WAKEUP, kind=REC_ENQUEUE)
    assert policy.observe(woke, Params()) is False
    woke.nr_wakeups = 2  # it slept within the period: not a hog any more
    params = Params()
    assert policy.observe(woke, params) is True and params.class_id != hog.class_id


def test_example_classify_knows_a_hog_by_its_sleeps_not_its_cpu_share() -> None:
    """A report covers at least a report period (100 ms): a hog that shared its CPU with two others
    ran a third of it and never slept; a sleeper ran longer and woke often; a task runnable all
    along but starved ran less than a slice."""
    policy = load_policy(str(EXAMPLES / "classify.py"), OPTS)
    shared_hog = reports(policy, Task(pid=2, comm=b"stress-ng-cpu", nr_wakeups=0, run_ns=33_000_000))
    assert shared_hog is not None and policy.class_params()[shared_hog.class_id].weight == 25
    assert reports(policy, Task(pid=3, comm=b"stress-ng-sleep", nr_wakeups=40, run_ns=60_000_000)) is None
    starved = Task(pid=4, comm=b"new", nr_wakeups=0, run_ns=OPTS.min_slice_ns - 1)
    assert reports(policy, starved) is None
    assert policy.stats() == {"class_moves": 1, "to_background": 1}


def test_example_round_robin_gives_heavy_tasks_their_own_slice_once() -> None:
    policy = load_policy(str(EXAMPLES / "round_robin.py"), OPTS)
    assert policy.class_params()[0].fifo is True
    heavy = reports(policy, Task(pid=7, weight=500))
    assert heavy is not None and heavy.own and heavy.fifo and heavy.weight == NICE0_WEIGHT
    assert heavy.slice_ns == 5 * OPTS.min_slice_ns
    assert reports(policy, Task(pid=7, weight=500)) is None and reports(policy, Task(pid=8)) is None


def test_example_boost_comm_puts_named_tasks_in_their_class() -> None:
    policy = load_policy(str(EXAMPLES / "boost_comm.py"), OPTS)
    got = reports(policy, Task(pid=3, comm=b"pipewire".ljust(16, b"\0")))
    assert got is not None and policy.class_params()[got.class_id].lag_ns == -OPTS.slice_ns
    assert reports(policy, Task(pid=3, comm=b"pipewire".ljust(16, b"\0"), class_id=got.class_id)) is None


def test_long_message_stays_one_short_line(tmp_path: Path) -> None:
    body = "raise RuntimeError('line one\\n' + 'x' * 1000)\n"
    message = usage_error(write(tmp_path, body))
    assert len(message) < 400
    assert message.endswith("...")


def test_validation_tasks_cover_the_cases() -> None:
    tasks = validation_tasks(PolicyOptions(nr_cpus=4))
    assert any(t.vtime == 0 and t.stop_ts == 0 for t in tasks)  # new task
    assert any(t.nr_cpus_allowed == 1 and t.cpu == 3 for t in tasks)  # pinned to the last CPU
    assert any(t.flags & 1 for t in tasks) and any(not t.flags & 1 for t in tasks)
    assert {t.weight for t in tasks} >= {1, 100, 10000}
    assert all(t.pid >= 2_000_000_000 for t in tasks)


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_example_policies_load_and_decide(example: str) -> None:
    policy = load_policy(str(EXAMPLES / example), OPTS)
    task, d = Task(), Decision()
    tasks = [EmulatedTask(1), EmulatedTask(2, cpu=1, nr_cpus_allowed=1), EmulatedTask(3, weight=1000)]
    for i in range(30):
        t = tasks[i % 3]
        t.ran(i * 1_000_000, i * 1_000_000 + 300_000)
        enqueue(policy, t, wakeup=i % 2 == 0, task=task, decision=d)
        assert check_decision(task, d, OPTS) is None
        assert d.cpu == (1 if t.nr_cpus_allowed == 1 else PYLAND_CPU_ANY)
    assert all(isinstance(v, int) for v in policy.stats().values())


def test_example_round_robin_rotates_and_scales_slice_by_weight() -> None:
    policy = load_policy(str(EXAMPLES / "round_robin.py"), OPTS)
    a, b = EmulatedTask(1), EmulatedTask(2, weight=500)
    da, db = enqueue(policy, a, wakeup=True), enqueue(policy, b, wakeup=True)
    assert da.deadline < db.deadline < enqueue(policy, a, wakeup=False).deadline
    assert (da.slice_ns, db.slice_ns) == (OPTS.min_slice_ns, 5 * OPTS.min_slice_ns)


def test_example_boost_comm_favours_named_tasks() -> None:
    policy = load_policy(str(EXAMPLES / "boost_comm.py"), OPTS)
    plain, favoured = EmulatedTask(1, comm=b"make"), EmulatedTask(2, comm=b"pipewire")
    for t in (plain, favoured):  # identical history: 8 ms bursts (not boosted by "deadline")
        for i in range(3):
            enqueue(policy, t, wakeup=True)
            t.ran(i * 10_000_000, i * 10_000_000 + 8_000_000)
    dp, df = enqueue(policy, plain, wakeup=True), enqueue(policy, favoured, wakeup=True)
    assert dp.preempt is False and df.preempt is True
    assert df.deadline == dp.deadline - OPTS.slice_ns
    assert policy.stats()["favoured"] == 4


def test_module_os_error_is_reported_as_the_modules_own(tmp_path: Path) -> None:
    spec = write(tmp_path, "open('/nonexistent/scxctl-policy-data')\n")
    assert "module raised FileNotFoundError: [Errno 2] No such file or directory" in usage_error(spec)


def test_module_calling_exit_is_a_usage_error(tmp_path: Path) -> None:
    spec = write(tmp_path, "import sys\nsys.exit(3)\n")
    assert usage_error(spec).endswith("module raised SystemExit: 3 (line 2)")
