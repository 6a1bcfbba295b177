"""Loading a policy by name or from FILE.py, and validating it before anything is attached.

A policy that fails here costs the user one line of error; the same bug found after attaching
would stall or eject the scheduler. Hence every failure becomes ScxctlError(ExitCode.USAGE) with
the file and the problem, and decide() is tried on synthetic tasks whose decisions are checked
field by field (set, right type, in range, pid and generation echoed).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType, TracebackType

from scxctl.errors import ExitCode, ScxctlError
from scxctl.log import get_logger
from scxctl.pyland.policies import BUILTIN_POLICIES
from scxctl.pyland.policy import (
    NSEC_PER_MSEC,
    NSEC_PER_USEC,
    PARAMS_FIELDS,
    PYLAND_CPU_ANY,
    SCX_ENQ_WAKEUP,
    U64_MAX,
    Decision,
    Params,
    Policy,
    PolicyOptions,
    Task,
)
from scxctl.pyland.records import REC_REPORT

log = get_logger("scxctl.pyland.policy")

VALIDATION_PID_BASE = 2_000_000_000  # above any pid_max, so never a real task's pid
_MAX_DETAIL = 240


def _fail(label: str, problem: str) -> ScxctlError:
    detail = " ".join(problem.split())
    if len(detail) > _MAX_DETAIL:
        detail = detail[: _MAX_DETAIL - 3] + "..."
    return ScxctlError(f"{label}: {detail}", ExitCode.USAGE)


def _line_in(tb: TracebackType | None, path: str | None) -> str:
    """' (line N)' for the innermost traceback frame in the policy file, or '' if none is."""
    line = None
    while tb is not None:
        if path is not None and tb.tb_frame.f_code.co_filename == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (line {line})" if line is not None else ""


def _describe(exc: BaseException, path: str | None) -> str:
    return f"{type(exc).__name__}: {exc}{_line_in(exc.__traceback__, path)}"


def is_file_spec(spec: str) -> bool:
    """A spec ending in .py or containing a slash names a file; anything else a built-in policy."""
    return spec.endswith(".py") or "/" in spec


def _module_name(path: Path) -> str:
    return "scxctl_user_policy_" + re.sub(r"\W", "_", path.stem)


def _exec_file(path: Path, label: str) -> ModuleType:
    if not path.exists():
        raise _fail(label, "file not found")
    if not path.is_file():
        raise _fail(label, "not a regular file")
    try:
        path.read_bytes()  # so that an OSError while executing is the module's own, not ours
    except OSError as exc:
        raise _fail(label, f"cannot read: {exc.strerror or exc}") from None
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise _fail(label, "cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing resolve names through sys.modules
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise _fail(label, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    except ImportError as exc:
        sys.modules.pop(name, None)
        raise _fail(label, f"import failed: {_describe(exc, str(path))}") from None
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        raise _fail(label, f"module raised {_describe(exc, str(path))}") from None
    return module


def _policy_class(module: ModuleType, label: str) -> type[Policy]:
    chosen = module.__dict__.get("POLICY")
    if chosen is not None:
        if not (isinstance(chosen, type) and issubclass(chosen, Policy)):
            raise _fail(label, f"POLICY must be a subclass of Policy, not {chosen!r}")
        return chosen
    found = [
        obj
        for obj in module.__dict__.values()
        if isinstance(obj, type)
        and issubclass(obj, Policy)
        and obj is not Policy
        and obj.__module__ == module.__name__  # classes imported to be subclassed do not count
    ]
    if not found:
        raise _fail(label, "defines no subclass of scxctl.pyland.policy.Policy")
    if len(found) > 1:
        names = ", ".join(sorted(cls.__name__ for cls in found))
        raise _fail(label, f"defines several Policy subclasses ({names}); choose one with POLICY = <class>")
    return found[0]


def _construct(cls: type[Policy], options: PolicyOptions, label: str, path: str | None) -> Policy:
    try:
        return cls(options)
    except (Exception, SystemExit) as exc:
        raise _fail(label, f"{cls.__name__}(options) raised {_describe(exc, path)}") from None


def validation_tasks(options: PolicyOptions) -> list[Task]:
    """Synthetic tasks covering the cases decide() must handle: new, pinned hog, waker, weights."""
    n = options.nr_cpus
    t0 = 1_000 * NSEC_PER_MSEC
    pid = VALIDATION_PID_BASE
    return [
        Task(pid=pid, cpu=0, nr_cpus_allowed=n, comm=b"validate-new"),
        Task(
            pid=pid + 1,
            cpu=n - 1,
            nr_cpus_allowed=1,
            start_ts=t0,
            stop_ts=t0 + 20 * NSEC_PER_MSEC,
            exec_runtime=20 * NSEC_PER_MSEC,
            run_ns=20 * NSEC_PER_MSEC,
            vtime=40 * NSEC_PER_MSEC,
            enq_cnt=5,
            comm=b"validate-hog",
        ),
        Task(
            pid=pid + 2,
            cpu=0,
            nr_cpus_allowed=n,
            flags=SCX_ENQ_WAKEUP,
            start_ts=t0 + 30 * NSEC_PER_MSEC,
            stop_ts=t0 + 30 * NSEC_PER_MSEC + 100 * NSEC_PER_USEC,
            weight=10000,
            run_ns=100 * NSEC_PER_USEC,
            vtime=10 * NSEC_PER_MSEC,
            enq_cnt=9,
            comm=b"validate-waker",
        ),
        Task(
            pid=pid + 3,
            cpu=n - 1,
            nr_cpus_allowed=n,
            flags=SCX_ENQ_WAKEUP,
            start_ts=t0,
            stop_ts=t0 + 3 * NSEC_PER_MSEC,
            exec_runtime=3 * NSEC_PER_MSEC,
            run_ns=3 * NSEC_PER_MSEC,
            weight=1,
            vtime=1 << 40,
            enq_cnt=1 << 33,
            comm=b"validate-nice19",
        ),
    ]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_decision(task: Task, decision: Decision, options: PolicyOptions) -> str | None:
    """What is wrong with `decision` for `task`, or None: the checks packing and the BPF rely on."""
    for field in Decision.__slots__:
        if not hasattr(decision, field):
            return f"left Decision.{field} unset"
    for field in ("preempt", "direct_wake"):
        value = getattr(decision, field)
        if type(value) is not bool:
            return f"set Decision.{field} to {value!r}; it must be True or False"
    for field in ("pid", "cpu", "slice_ns", "deadline", "vtime", "enq_cnt"):
        value = getattr(decision, field)
        if not _is_int(value):
            return f"set Decision.{field} to {value!r} ({type(value).__name__}); it must be an int"
    if decision.pid != task.pid:
        return f"set Decision.pid to {decision.pid}; it must echo Task.pid ({task.pid})"
    if decision.enq_cnt != task.enq_cnt:
        return f"set Decision.enq_cnt to {decision.enq_cnt}; it must echo Task.enq_cnt ({task.enq_cnt})"
    cpu = decision.cpu
    if cpu != PYLAND_CPU_ANY and not 0 <= cpu < options.nr_cpus:
        return f"set Decision.cpu to {cpu}; it must be -1 (any) or 0..{options.nr_cpus - 1}"
    if task.nr_cpus_allowed == 1 and cpu not in (PYLAND_CPU_ANY, task.cpu):
        return f"sent a task pinned to CPU {task.cpu} to CPU {cpu}; use its CPU or -1"
    for field in ("slice_ns", "deadline", "vtime"):
        value = getattr(decision, field)
        if not 0 <= value <= U64_MAX:
            return f"set Decision.{field} to {value}; it must fit an unsigned 64-bit integer"
    return None


def validate_decide(policy: Policy, options: PolicyOptions, label: str, path: str | None = None) -> None:
    """Run decide() on the validation tasks; raise a one-line usage error on the first problem."""
    for task in validation_tasks(options):
        decision = Decision.unset()
        try:
            policy.decide(task, decision)
        except (Exception, SystemExit) as exc:
            raise _fail(label, f"decide() raised {_describe(exc, path)} on a validation task") from None
        problem = check_decision(task, decision, options)
        if problem is not None:
            raise _fail(label, f"decide() {problem} (validation task {task.comm_text})")


def check_params(params: object) -> str | None:
    """What is wrong with a Params (types only: BPF clamps values out of range), or None."""
    if not isinstance(params, Params):
        return f"gave {params!r}; it must be a Params"
    for field in PARAMS_FIELDS:
        value = getattr(params, field, None)
        if field in ("own", "sync", "fifo", "preemptible"):
            if type(value) is not bool:
                return f"set Params.{field} to {value!r}; it must be True or False"
        elif not _is_int(value):
            return f"set Params.{field} to {value!r} ({type(value).__name__}); it must be an int"
    return None


def validate_steering(policy: Policy, label: str, path: str | None = None) -> None:
    """Run class_params() and observe() (on the validation tasks as reports); a one-line usage
    error on the first problem."""
    try:
        classes = policy.class_params()
    except (Exception, SystemExit) as exc:
        raise _fail(label, f"class_params() raised {_describe(exc, path)}") from None
    if not isinstance(classes, dict):
        raise _fail(label, f"class_params() returned {classes!r}; it must be a dict of class id to Params")
    for class_id, params in classes.items():
        problem = "has a key that is not an int" if not _is_int(class_id) else check_params(params)
        if problem is not None:
            raise _fail(label, f"class_params() {problem} (class {class_id!r})")
    for task in validation_tasks(policy.options):
        task.kind = REC_REPORT
        task.nr_wakeups = 3 if task.flags & SCX_ENQ_WAKEUP else 0
        params = Params()
        try:
            changed = policy.observe(task, params)
        except (Exception, SystemExit) as exc:
            raise _fail(label, f"observe() raised {_describe(exc, path)} on a validation task") from None
        if type(changed) is not bool:
            raise _fail(label, f"observe() returned {changed!r}; it must return True or False")
        problem = check_params(params)
        if problem is not None:
            raise _fail(label, f"observe() {problem} (validation task {task.comm_text})")


def load_policy(spec: str, options: PolicyOptions) -> Policy:
    """A built-in policy by name or the policy defined in FILE.py, constructed and validated before
    any attach; every failure is a ScxctlError(ExitCode.USAGE) with a one-line message.

    Validation runs on a throw-away instance, so the returned one has seen no synthetic task.
    """
    path: str | None = None
    if is_file_spec(spec):
        label = f"policy file {spec}"
        file = Path(spec)
        cls = _policy_class(_exec_file(file, label), label)
        path = str(file)
    else:
        label = f"policy {spec}"
        found = BUILTIN_POLICIES.get(spec)
        if found is None:
            names = ", ".join(sorted(BUILTIN_POLICIES))
            raise _fail(label, f"unknown policy; built-in policies: {names}; or give a FILE.py")
        cls = found
    if cls.decide is Policy.decide:
        raise _fail(label, f"{cls.__name__} does not define decide(self, task, decision)")
    if not isinstance(cls.name, str) or not cls.name:
        raise _fail(label, f"{cls.__name__}.name must be a non-empty string")
    validate_decide(_construct(cls, options, label, path), options, label, path)
    if cls.steers():
        validate_steering(_construct(cls, options, label, path), label, path)
    policy = _construct(cls, options, label, path)
    log.debug("policy loaded", policy=cls.name, spec=spec, cls=cls.__qualname__)
    return policy
