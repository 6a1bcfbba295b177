"""Tests x schedulers: run each scheduler in turn, every selected test under it, into one report."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scxctl import __version__, paths
from scxctl.bench import adaptive, fairness, worker
from scxctl.bench.converge import Measurement
from scxctl.bench.env import Env
from scxctl.bench.overhead import measure_overhead
from scxctl.bench.scheduler import RunningScheduler, SchedulerLeft, SchedulerSpec, check_can_start
from scxctl.bench.schema import SCHEMA_ID
from scxctl.bench.topology import Topology, check_cpu, load_topology
from scxctl.errors import ExitCode, ScxctlError, UsageError
from scxctl.fsutil import atomic_write_text
from scxctl.log import get_logger
from scxctl.sysfs import SysRoot, read_sched_ext

if TYPE_CHECKING:
    from scxctl.bench.ktrace import BenchTracer

log = get_logger("scxctl.bench")


@dataclass(frozen=True)
class TestInfo:
    cli_name: str
    name: str  # schtest's name
    threshold: float
    direction: str  # "<" or ">="
    summary: str


TESTS: dict[str, TestInfo] = {
    "adaptive-priority": TestInfo(
        "adaptive-priority",
        adaptive.NAME,
        adaptive.THRESHOLD,
        adaptive.DIRECTION,
        "p90 fast-wake / p90 slow-wake latency on one CPU (lower is better)",
    ),
    "fairness": TestInfo(
        "fairness",
        fairness.NAME,
        fairness.THRESHOLD,
        fairness.DIRECTION,
        "p10 / mean CPU time of pinned + unpinned spinners (higher is better)",
    ),
}


@dataclass
class BenchOptions:
    tests: list[str]
    schedulers: list[SchedulerSpec]
    min_time: float = 5.0
    max_time: float = 10.0
    cpu: int | None = None
    start_timeout_s: float = 60.0
    trace: bool = False  # also measure the workers' wake-ups in the kernel (scxctl.bench.ktrace, bcc)


@dataclass
class Hooks:
    """What the terminal renderer plugs in (all optional)."""

    begin_test: Callable[[str, str], None] = field(default=lambda scheduler, test: None)
    end_test: Callable[[dict[str, Any]], None] = field(default=lambda result: None)
    env: Env = field(default_factory=Env)


def validate(opts: BenchOptions, sysroot: SysRoot | None = None) -> tuple[Topology, int]:
    """Every check that can fail before anything starts; returns the topology and the test CPU."""
    if opts.min_time <= 0 or opts.max_time <= 0:
        raise UsageError("--min-time and --max-time must be positive")
    if opts.min_time > opts.max_time:
        raise UsageError(f"--min-time ({opts.min_time:g} s) is greater than --max-time ({opts.max_time:g} s)")
    for t in opts.tests:
        if t not in TESTS:
            raise UsageError(f"unknown test {t!r} (known: {', '.join(TESTS)})")
    topo = load_topology(sysroot)
    cpu = topo.first_hyperthread if opts.cpu is None else opts.cpu
    check_cpu(topo, cpu)
    if any(s.kind != "default" for s in opts.schedulers):
        check_can_start(sysroot)
    return topo, cpu


def machine_facts(topo: Topology, sysroot: SysRoot | None = None) -> dict[str, Any]:
    sr = sysroot or SysRoot()
    st = read_sched_ext(sr)
    model = None
    try:
        for line in sr.read_text("/proc/cpuinfo").splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {
        "kernel": sr.kernel_release(),
        "machine": platform.machine(),
        "cpu_model": model,
        "cpus_online": len(topo.online),
        "online_cpus": topo.online,
        "cores": topo.cores,
        "python": platform.python_version(),
        "scxctl": __version__,
        "sched_ext": {"available": st.available, "state": st.state, "ops": st.ops},
    }


def _status(info: TestInfo, final: Measurement | None) -> tuple[str, bool | None, bool]:
    """(status, passed, unreliable) of a test from its final counted measurement."""
    if final is None or final.metric is None:
        return "unreliable", None, True
    passed = final.metric < info.threshold if info.direction == "<" else final.metric >= info.threshold
    unreliable = bool(final.detail.get("unreliable", False))
    if unreliable:
        return "unreliable", passed, True
    return ("pass" if passed else "fail"), passed, False


def _run_test(info: TestInfo, opts: BenchOptions, topo: Topology, cpu: int, env: Env,
              tracer: BenchTracer | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "test": info.name,
        "threshold": info.threshold,
        "direction": info.direction,
        "status": "error",
        "metric": None,
        "pass": None,
        "unreliable": False,
        "error": None,
        "cpu": cpu if info.name == adaptive.NAME else None,
        "overhead": None,
        "measurements": [],
        "final": None,
        "elapsed_s": None,
    }
    out: list[Measurement] = []
    t0 = time.monotonic()
    try:
        result["overhead"] = measure_overhead(env, cpu)
        if info.name == adaptive.NAME:
            traced = tracer.wrap(env) if tracer is not None else env
            final = adaptive.run(traced, cpu, opts.min_time, opts.max_time, out)
        else:
            final = fairness.run(env, topo.online, opts.min_time, opts.max_time, out)
        env.health()  # ejected during the last round?
        status, passed, unreliable = _status(info, final if final.counted else None)
        result.update({"status": status, "pass": passed, "unreliable": unreliable})
        result["metric"] = None if final.metric is None else round(final.metric, 4)
        result["final"] = final.to_json()
    except SchedulerLeft as exc:
        result.update(status="invalid", error=exc.message)
    except ScxctlError as exc:
        if exc.code in (ExitCode.PERMISSION, ExitCode.USAGE):
            raise
        result.update(status="error", error=exc.message)
    finally:
        result["measurements"] = [m.to_json() for m in out]
        result["elapsed_s"] = round(time.monotonic() - t0, 3)
    return result


def run_bench(
    opts: BenchOptions, hooks: Hooks | None = None, sysroot: SysRoot | None = None
) -> dict[str, Any]:
    hooks = hooks or Hooks()
    topo, cpu = validate(opts, sysroot)
    if hooks.env.worker is None:  # a missing or stale worker ends the bench before any scheduler starts
        hooks.env.worker = worker.resolve()
    report: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine_facts(topo, sysroot),
        "options": {
            "tests": [TESTS[t].name for t in opts.tests],
            "min_time_s": opts.min_time,
            "max_time_s": opts.max_time,
            "cpu": cpu,
            "schedulers": [s.label for s in opts.schedulers],
            "trace": opts.trace,
        },
        "runs": [],
        "exit_code": None,
    }
    report["options"]["harness"] = _harness(hooks.env)
    tracer = _open_tracer() if opts.trace else None
    try:
        _run_all(opts, hooks, sysroot, topo, cpu, report, tracer)
    finally:
        if tracer is not None:
            tracer.close()
    if tracer is not None:
        report["options"]["trace_compile_s"] = round(tracer.compile_s, 3)
    compare_to_default(report)
    report["exit_code"] = int(exit_code(report))
    return report


def _harness(env: Env) -> dict[str, Any]:
    """Which native worker ran the roles, and from which sources."""
    found = next((c for c in worker.inspect().candidates if c.path == env.worker), None)
    return {
        "worker": str(env.worker),
        "source_hash": found.info.source_hash if found is not None and found.info is not None else None,
    }


def _open_tracer() -> BenchTracer:
    """Before any scheduler starts: a missing bcc or kernel headers ends the bench at once (exit 7)."""
    from scxctl.bench.ktrace import BenchTracer

    return BenchTracer()


def _run_all(opts: BenchOptions, hooks: Hooks, sysroot: SysRoot | None, topo: Topology, cpu: int,
             report: dict[str, Any], tracer: BenchTracer | None) -> None:
    for spec in opts.schedulers:
        run: dict[str, Any] = {
            "scheduler": spec.to_json(),
            "valid": True,
            "invalid_reason": None,
            "tests": [],
        }
        report["runs"].append(run)
        with RunningScheduler(spec, sysroot, opts.start_timeout_s) as sched:
            run["scheduler"] = sched.facts()
            env = Env(
                sched_ext=sched.partial,
                heartbeat=hooks.env.heartbeat,
                health=sched.check,
                on_start=hooks.env.on_start,
                on_done=hooks.env.on_done,
                round_timeout_s=hooks.env.round_timeout_s,
                worker=hooks.env.worker,
            )
            for name in opts.tests:
                info = TESTS[name]
                hooks.begin_test(spec.label, info.name)
                result = _run_test(info, opts, topo, cpu, env, tracer)
                run["tests"].append(result)
                hooks.end_test(result)
                if result["status"] == "invalid":
                    run.update(valid=False, invalid_reason=result["error"])
                    break


def compare_to_default(report: dict[str, Any]) -> None:
    """Each adaptive_priority result gets its wake percentiles as ratios to the default scheduler's
    from the same report (`vs_default`): a scheduler that wins the metric by slowing the slow
    wake-ups down, rather than by speeding the fast ones up, shows it here."""
    def final_of(run: dict[str, Any]) -> dict[str, Any] | None:
        t = next((t for t in run["tests"] if t["test"] == adaptive.NAME), None)
        return t["final"] if t is not None else None

    base = next((final_of(r) for r in report["runs"] if r["scheduler"]["kind"] == "default"), None)
    for run in report["runs"]:
        for t in run["tests"]:
            if t["test"] != adaptive.NAME:
                continue
            mine = t["final"]
            t["vs_default"] = None if base is None or mine is None else {
                side: {q: _ratio(mine[side][f"{q}_ns"], base[side][f"{q}_ns"]) for q in ("p50", "p90", "p99")}
                for side in ("fast", "slow")
            }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def exit_code(report: dict[str, Any]) -> ExitCode:
    """EJECTED if any run is invalid; OK only when every test passed reliably; FAILURE otherwise."""
    if any(not r["valid"] for r in report["runs"]):
        return ExitCode.EJECTED
    statuses = [t["status"] for r in report["runs"] for t in r["tests"]]
    return ExitCode.OK if statuses and all(s == "pass" for s in statuses) else ExitCode.FAILURE


def save(report: dict[str, Any], text: str, output: Path | None = None, tag: str | None = None) -> Path:
    """Atomic writes: always under bench_results_dir() with a timestamp, and to --output if given.

    `tag` names the file after what ran (default: the tests of a schtest-style report)."""
    stamp = report["created"].replace("-", "").replace(":", "")
    tag = tag or "+".join(t.replace("_", "-") for t in report["options"]["tests"])
    path = paths.bench_results_dir() / f"{stamp}-{tag}-{os.getpid()}.json"
    atomic_write_text(path, text)
    if output is not None:
        atomic_write_text(output, text)
    return path
