"""`scxctl enable|switch|disable|status|list`: talk to the daemon, render its answer.

`switch` and `list` also take scx_loader's forms; its other verbs are in loader.py.

On the `scxctl status` path: keep module-level imports to the socket client and sysfs (no Rich, no
daemon internals); output goes through ui.line, which imports Rich only for a terminal.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from scxctl import ui
from scxctl.daemon import client
from scxctl.daemon.modes import Mode
from scxctl.errors import ExitCode, ScxctlError, UsageError


def _ago(ts: float | None) -> str:
    if not ts:
        return ""
    secs = max(0, int(time.time() - ts))
    return f"{secs}s ago" if secs < 120 else f"{secs // 60}m ago" if secs < 7200 else f"{secs // 3600}h ago"


def render_status(st: dict[str, Any]) -> None:
    k, d, s, dm = st["kernel"], st["desired"], st["supervisor"], st["daemon"]
    ui.line((st["summary"], "bold"))
    owner = {"scxctl": "managed by scxctl", "other": "NOT managed by scxctl", None: "none loaded"}[k["owner"]]
    ui.line(f"kernel:     sched_ext {k['state'] or 'unavailable'}, ops {k['ops'] or '-'} ({owner})")
    want = f"{d['scheduler']} mode {d['mode']}" + (f" policy {d['policy']}" if d["policy"] else "")
    ui.line(f"desired:    {want if d['enabled'] else 'disabled'} (set {_ago(d['updated_at']) or 'never'})")
    ui.line(
        f"supervisor: {s['phase']}, pid {s['pid'] or '-'}, restarts {s['restart_count']}, "
        f"re-attaches {s.get('reattach_count', 0)} (kernel-requested, not failures), "
        f"failures in window {s['failures_in_window']}"
    )
    last = s["last_exit"]
    if last:
        msg = f" - {last['message']}" if last.get("message") else ""
        ui.line(f"last exit:  {last['kind']}: {last['reason']}{msg} ({_ago(last['at'])})")
    if s["gave_up"]:
        ui.line(f"gave up:    {s['gave_up']['reason']}")
    cg = st.get("cgroups")
    if cg and cg.get("cgroups"):
        rows = cg["cgroups"]
        throttled = [r for r in rows if r["throttled"]]
        ui.line(f"cpu.max:    {len(rows)} cgroup(s) limited by pyland, {len(throttled)} throttled now; "
                f"{cg['held']} task hold(s), {cg['preempted']} tick stop(s)")
        for r in rows[:10]:
            state = "THROTTLED" if r["throttled"] else "ok"
            ui.line(f"            {r['path'] or r['id']}: {r['quota_us']}/{r['period_us']} us, {state}, "
                    f"throttled {r['nr_throttled']} period(s) ({r['throttled_ms']} ms), "
                    f"used {r['usage_ms']} ms")
    for key in ("config_error", "state_error"):
        if dm.get(key):
            ui.line((f"{key.replace('_', ' ')}:", "red"), f" {dm[key]}")


def status(json_output: bool = typer.Option(False, "--json", help="Print the JSON status document.")) -> None:
    """What runs now, from the kernel's point of view, and what the daemon wants and did.

    Without a daemon the kernel's view is still printed, and the exit status is 6.
    """
    try:
        st = client.call("status")
    except client.DaemonUnreachable as exc:
        from scxctl.sysfs import read_sched_ext

        k = read_sched_ext()
        kernel = {
            "sched_ext": k.available,
            "state": k.state,
            "ops": k.ops,
            "owner": None if not (k.enabled or k.ops) else "other",
        }
        if json_output:
            ui.print_json({"summary": f"no daemon: {exc.message}", "kernel": kernel, "daemon": None})
        else:
            ui.line(f"daemon:     not running ({exc.message})")
            ui.line(f"kernel:     sched_ext {k.state or 'unavailable'}, ops {k.ops or '-'}")
        raise typer.Exit(int(ExitCode.DAEMON_UNREACHABLE)) from None
    if json_output:
        ui.print_json(st)
    else:
        render_status(st)


def _change(op: str, args: dict[str, Any], auto_start: bool) -> None:
    try:
        st = client.call(op, args, timeout=client.CHANGE_TIMEOUT_S)
    except client.DaemonUnreachable:
        if not auto_start:
            raise
        how = client.start_daemon()
        ui.line(f"scxctl: started the daemon ({how})", stderr=True)
        st = client.call(op, args, timeout=client.CHANGE_TIMEOUT_S)
    ui.line(st["summary"])


def enable(
    scheduler: str | None = typer.Argument(None, help="pyland (default) or an allow-listed scx_* scheduler."),
    mode: Annotated[Mode | None, typer.Option("--mode", "-m", help="Mode (default from the config).")] = None,
    policy: str | None = typer.Option(None, "--policy", "-p", help="pyland policy (deadline, fifo, ...)."),
    force: bool = typer.Option(False, "--force", help="Unload a scheduler scxctl did not start (SysRq-S)."),
) -> None:
    """Run a scheduler under the daemon (started if needed) and keep it running across failures and boots."""
    args = {"scheduler": scheduler, "mode": mode.value if mode else None, "policy": policy, "force": force}
    _change("enable", args, auto_start=True)


def switch(
    scheduler: str | None = typer.Argument(
        None, help="Scheduler to switch to (keeps the current one if omitted)."
    ),
    mode: Annotated[
        Mode | None, typer.Option("--mode", "-m", case_sensitive=False, help="Mode to switch to.")
    ] = None,
    policy: str | None = typer.Option(None, "--policy", "-p", help="pyland policy to switch to."),
    sched: Annotated[
        str | None,
        typer.Option("--sched", "-s",
                     help="scx_loader's form of SCHEDULER: switch to it in the current mode."),
    ] = None,
    args: Annotated[
        list[str] | None,
        typer.Option("--args", "-a",
                     help="Arguments to run the scheduler with, comma-separated (allow-listed; "
                     "needs --sched, runs in mode auto, not with --mode)."),
    ] = None,
) -> None:
    """Change the running scheduler or its mode (scheduler name or --mode required).

    Also scx_loader's form: `switch -s SCHED [-m MODE | -a ARGS]`. `-s SCHED` without `-m` keeps
    the current mode (scx_loader's meaning); a bare SCHEDULER takes the configured default mode.
    """
    from scxctl.commands.loader import running, split_args

    if scheduler is not None and sched is not None and scheduler != sched:
        raise UsageError(f"two schedulers given: {scheduler!r} and --sched {sched!r}")
    extra = split_args(args)
    if extra is not None and mode is not None:
        raise UsageError("the argument '--args' cannot be used with '--mode'")
    target = sched if sched is not None else scheduler
    if extra is not None and target is None:
        raise UsageError("the argument '--args' requires '--sched'")
    if target is None and mode is None and policy is None:
        raise UsageError("give a scheduler or --mode", hint="scxctl list shows both")
    req: dict[str, Any] = {"scheduler": target, "mode": mode.value if mode else None, "policy": policy}
    if extra is not None:
        req["args"], req["mode"] = extra, Mode.auto.value  # scx_loader's SwitchSchedulerWithArgs
    elif sched is not None:
        req["keep_mode"] = True
    if sched is None and extra is None:
        _change("switch", req, False)
        return
    st = client.call("switch", req, timeout=client.CHANGE_TIMEOUT_S)
    ui.line(f"switched to {running(st)}")


def disable() -> None:
    """Stop the daemon's scheduler and return to the kernel's default scheduler (remembered across boots)."""
    _change("disable", {}, auto_start=False)


def list_(json_output: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Schedulers the daemon may run (pyland and the config's allow-list) and the modes.

    The first line is scx_loader's `supported schedulers: ["pyland", "bpfland", ...]`.
    """
    try:
        data = client.call("list")
    except client.DaemonUnreachable:
        from scxctl import paths
        from scxctl.daemon.config import ConfigError, load_config
        from scxctl.daemon.listing import listing

        try:
            data = listing(load_config(paths.config_file()))
        except ConfigError as exc:
            raise ScxctlError(str(exc)) from None
    if json_output:
        ui.print_json(data)
        return
    # scx_loader's one line first, for its scripts: the names without the scx_ prefix
    names = ", ".join(f'"{s["name"].removeprefix("scx_")}"' for s in data["schedulers"])
    ui.line(f"supported schedulers: [{names}]")
    ui.line(("schedulers", "bold"))
    for s in data["schedulers"]:
        default = " (default)" if s["name"] == data["default_scheduler"] else ""
        extra = f"policies: {', '.join(s['policies'])}" if s["kind"] == "pyland" else " ".join(s["command"])
        avail = "" if s["available"] else " missing"
        ui.line(f"  {s['name']}{default}: ops {s['ops']}; {extra}", (avail, "red"))
    ui.line(("modes", "bold"))
    for m in data["modes"]:
        default = " (default)" if m["name"] == data["default_mode"] else ""
        ui.line(f"  {m['name']}{default}: {' '.join(m['pyland_options'])} - {m['why']}")


def register(app: typer.Typer) -> None:
    app.command("enable")(enable)
    app.command("switch")(switch)
    app.command("disable")(disable)
    app.command("status")(status)
    app.command("list")(list_)
