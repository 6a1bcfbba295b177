"""`scxctl run [pyland]`: run the pyland scheduler in the foreground until Ctrl-C/SIGTERM."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from scxctl.errors import ScxctlError, UsageError
from scxctl.pyland.options import MAX_HOLD_MS, RunOptions

D = RunOptions()  # every option's default


class SchedulerChoice(enum.StrEnum):
    pyland = "pyland"


_POLICY_HELP = "Built-in policy (deadline, fifo) or a Python file defining a Policy subclass."
_IDLE_HELP = "Let BPF put a waking task straight onto an idle CPU (no Python round trip)."
_ROUND_TRIP_HELP = (
    "Every enqueue waits for the policy's decide() (the synchronous mode), instead of BPF placing "
    "tasks from the parameters the policy sets; a policy without observe() always runs this way."
)
_PREEMPT_HELP = "Steer mode: a waking task whose deadline is earlier than the running one's preempts it."
_DIRECT_HELP = (
    "Round-trip mode: let BPF place the wake-ups of tasks the policy marked latency-critical at once; the "
    "policy hears of them at most once a budget per task, and can withdraw the grant."
)
_NEW_HELP = (
    "Round-trip mode: let BPF place a task's first run (a fork) behind the running deadlines; "
    "the policy first sees the task at its next enqueue."
)
_PARTIAL_HELP = "Only schedule tasks that chose SCHED_EXT (policy 7); all others stay on the fair class."


def run(
    scheduler: Annotated[
        SchedulerChoice, typer.Argument(help="The scheduler to run.")
    ] = SchedulerChoice.pyland,
    policy: Annotated[
        str, typer.Option("--policy", "-p", metavar="NAME|FILE.py", help=_POLICY_HELP)
    ] = D.policy,
    round_trip: Annotated[bool, typer.Option("--round-trip", help=_ROUND_TRIP_HELP)] = D.round_trip,
    report_ms: Annotated[
        int, typer.Option("--report-ms", min=1, metavar="MS",
                          help="Steer mode: each task reports what it did to the policy at most every MS.")
    ] = D.report_ms,
    wake_preempt: Annotated[
        bool, typer.Option("--wake-preempt/--no-wake-preempt", help=_PREEMPT_HELP)] = D.wake_preempt,
    builtin_idle: Annotated[
        bool, typer.Option("--builtin-idle/--no-builtin-idle", help=_IDLE_HELP)] = D.builtin_idle,
    direct_wake: Annotated[
        bool, typer.Option("--direct-wake/--no-direct-wake", help=_DIRECT_HELP)] = D.direct_wake,
    new_direct: Annotated[bool, typer.Option("--new-direct/--no-new-direct", help=_NEW_HELP)] = D.new_direct,
    slice_us: Annotated[
        int, typer.Option("--slice-us", min=1, help="User-space scheduling budget in us (vruntime scale).")
    ] = D.slice_us,
    slice_min_us: Annotated[
        int, typer.Option("--slice-min-us", min=1, help="BPF default/refill time slice in us.")
    ] = D.slice_min_us,
    partial: Annotated[bool, typer.Option("--partial", help=_PARTIAL_HELP)] = D.partial,
    stats_interval: Annotated[
        float,
        typer.Option("--stats-interval", min=0.0, metavar="S",
                     help="Seconds between summary lines (0: off)."),
    ] = D.stats_interval,
    max_backlog: Annotated[
        int, typer.Option("--max-backlog", min=1, help="Tasks Python may lag before BPF schedules them.")
    ] = D.max_backlog,
    ring_kib: Annotated[
        int,
        typer.Option("--ring-kib", min=0, metavar="KIB",
                     help="Size of the ring of tasks waiting for the policy, a power of two in KiB (0: "
                          "the built-in 512, about 3600 tasks); when it is full, BPF places tasks itself."),
    ] = D.ring_kib,
    policy_budget_ms: Annotated[
        int,
        typer.Option("--policy-budget-ms", min=0, metavar="MS",
                     help="A policy that does not return from decide() within MS detaches pyland "
                          "(exit 1; 0: no watchdog)."),
    ] = D.policy_budget_ms,
    cpu_max_hold_ms: Annotated[
        int,
        typer.Option("--cpu-max-hold-ms", min=1, max=MAX_HOLD_MS, metavar="MS",
                     help="A task of a cgroup out of its cpu.max quota waits at most MS, then runs "
                          "even though its cgroup is still throttled (counted as nr_bw_overdue); "
                          "below the kernel's 5 s watchdog."),
    ] = D.cpu_max_hold_ms,
    allow_stale: Annotated[
        bool, typer.Option("--allow-stale", help="Load a BPF object whose build hash does not match bpf/.")
    ] = D.allow_stale,
    bpf_object: Annotated[
        Path | None, typer.Option("--bpf-object", help="Load this object instead of the search order.")
    ] = D.object_path,
) -> None:
    """Run pyland (scheduling decisions in Python) in the foreground; Ctrl-C or SIGTERM detaches it.

    The first SIGINT/SIGTERM detaches and exits, even while the policy is stuck; a second one exits
    at once (130). When the kernel asks for a restart (a CPU went offline or online), pyland attaches
    again with the same policy object, at most 10 times a minute.

    Exit status: 0 after a clean detach, 1 when the policy raised or overran --policy-budget-ms, 2
    usage (bad policy file), 3 not root, 4 no sched_ext, 5 another scheduler loaded, 7 BPF object
    missing/stale or verifier rejection, 8 the kernel ejected pyland (or asked for too many restarts),
    130 a second signal.
    """
    from scxctl.pyland.scheduler import run_pyland

    if ring_kib and (ring_kib < 4 or ring_kib & (ring_kib - 1)):
        raise UsageError(f"--ring-kib must be a power of two of at least 4, not {ring_kib}")
    if slice_min_us > slice_us:
        raise UsageError(f"--slice-min-us ({slice_min_us}) must not exceed --slice-us ({slice_us})")
    opts = RunOptions(policy=policy, round_trip=round_trip, report_ms=report_ms, wake_preempt=wake_preempt,
                      builtin_idle=builtin_idle, direct_wake=direct_wake,
                      new_direct=new_direct, slice_us=slice_us,
                      slice_min_us=slice_min_us,
                      partial=partial, stats_interval=stats_interval, max_backlog=max_backlog,
                      allow_stale=allow_stale, policy_budget_ms=policy_budget_ms, ring_kib=ring_kib,
                      cpu_max_hold_ms=cpu_max_hold_ms, object_path=bpf_object)
    res = run_pyland(opts)
    typer.echo(_summary(res.loop_stats, res.bpf_stats, res.restarts), err=True)
    if res.code != 0:
        raise ScxctlError(res.message, res.code)
    typer.echo(res.message, err=True)


def _summary(loop: dict[str, int], bpf: dict[str, int], restarts: int) -> str:
    """The counters a user checks first: how much BPF placed, how much went to the policy."""
    return (
        f"pyland: {bpf['nr_steered']} placed by BPF on the policy's parameters, {loop['observed']} "
        f"reports observed, {bpf['nr_updates']} parameter updates, {bpf['nr_wake_preempts']} wake-up "
        f"preemptions ({bpf['nr_preempt_other']} of another CPU, {bpf['nr_weight_preempts']} of a lighter "
        f"task, {bpf['nr_peer_preempts']} of a preemptible task by another, {bpf['nr_irq_preempts']} by a "
        f"wake-up from an interrupt, {bpf['nr_loop_preempts']} of the scheduler's turn in a gap); "
        f"{loop['consumed']} tasks queued to Python, {loop['written']} decisions, "
        f"{bpf['nr_dispatched']} applied, {bpf['nr_stale']} stale, {bpf['nr_ring_full']} ring-full and "
        f"{bpf['nr_backlog']} backlog fallbacks, {bpf['nr_direct']} direct (idle CPU), "
        f"{bpf['nr_kthread']} kthreads, {bpf['nr_stalled']} placed while the policy overran, "
        f"{bpf['nr_watched_turns']} scheduler turns given first while the watchdog timed a call, "
        f"{restarts} restarts; loop CPU "
        f"{loop['busy_cpu_ns'] / 1e6:.1f} ms, wall {loop['busy_wall_ns'] / 1e6:.1f} ms in batches, "
        f"{loop['service_cpu_ns'] / 1e6:.1f} ms in {loop['services']} services"
    )


def register(app: typer.Typer) -> None:
    app.command("run")(run)
