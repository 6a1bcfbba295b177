"""scx_loader's `scxctl` verbs (get, start, stop, restart, restore, modes), served by our daemon.

Users and scripts of scx_loader type `scxctl start -s lavd -m gaming` and parse `scxctl get`; these
commands take the same flags and print the same lines, but talk to our daemon over its control
socket, so they share its desired state, allow-list and permissions with `enable` and D-Bus.
`switch` and `list` are ours and accept scx_loader's forms too (commands/lifecycle.py).

Kept import-light like lifecycle.py: a socket round trip, no Rich, no daemon internals.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from scxctl import ui
from scxctl.daemon import client
from scxctl.daemon.modes import Mode
from scxctl.errors import UsageError

PANEL = "scx_loader compatible"

# scx_loader prints its SupportedSched and SchedMode enums with Rust's {:?}: these spellings
UPSTREAM_NAMES = {
    "scx_beerland": "Beerland", "scx_bpfland": "Bpfland", "scx_cake": "Cake", "scx_cosmos": "Cosmos",
    "scx_flash": "Flash", "scx_flow": "Flow", "scx_lavd": "Lavd", "scx_pandemonium": "Pandemonium",
    "scx_p2dq": "P2DQ", "scx_tickless": "Tickless", "scx_rustland": "Rustland", "scx_rusty": "Rusty",
}
UPSTREAM_MODES = {
    Mode.auto: "Auto", Mode.gaming: "Gaming", Mode.powersave: "PowerSave",
    Mode.lowlatency: "LowLatency", Mode.server: "Server",
}


def display_name(name: str) -> str:
    """A scheduler as scx_loader's scxctl prints it: `scx_lavd` and `lavd` -> `Lavd`, pyland -> `Pyland`."""
    full = name if name.startswith("scx_") else f"scx_{name}"
    if full in UPSTREAM_NAMES:
        return UPSTREAM_NAMES[full]
    base = name.removeprefix("scx_")
    return base[:1].upper() + base[1:]


def display_mode(mode: str | None) -> str:
    try:
        return UPSTREAM_MODES[Mode(mode or "auto")]
    except ValueError:
        return str(mode)


def split_args(values: list[str] | None) -> list[str] | None:
    """`-a` values as scx_loader splits them: on commas, every occurrence. Click keeps the `=` of
    `-a=-v,--x` (clap drops it): one leading `=` is dropped, as no scheduler option starts with it."""
    if values is None:
        return None
    return [part for v in values for part in v.removeprefix("=").split(",")]


def request(op: str, args: dict[str, Any] | None = None, auto_start: bool = False) -> dict[str, Any]:
    """One change request; the daemon is started first when none answers and `auto_start`."""
    try:
        return client.call(op, args, timeout=client.CHANGE_TIMEOUT_S)  # type: ignore[no-any-return]
    except client.DaemonUnreachable:
        if not auto_start:
            raise
        how = client.start_daemon()
        ui.line(f"scxctl: started the daemon ({how})", stderr=True)
        return client.call(op, args, timeout=client.CHANGE_TIMEOUT_S)  # type: ignore[no-any-return]


def running(st: dict[str, Any]) -> str:
    """`X in Mode mode` or `X with arguments "..."` for the daemon's scheduler in a status reply."""
    sup = st["supervisor"]
    name = display_name(sup["scheduler"] or st["desired"]["scheduler"] or "unknown")
    args = sup.get("args") or []
    if args:
        return f'{name} with arguments "{" ".join(args)}"'
    return f"{name} in {display_mode(sup['mode'] or st['desired']['mode'])} mode"


SchedOption = Annotated[
    str, typer.Option("--sched", "-s", help="Scheduler to start (lavd, scx_lavd, pyland, ...).")
]
ModeOption = Annotated[
    Mode | None,
    typer.Option("--mode", "-m", case_sensitive=False,
                 help="Mode to start in [default: the configured default_mode]."),
]
ArgsOption = Annotated[
    list[str] | None,
    typer.Option("--args", "-a", help="Arguments to run the scheduler with, comma-separated (allow-listed)."),
]


def get() -> None:
    """Get the info on the running scheduler (scx_loader's wording).

    Prints `running Lavd in Gaming mode`, `running Lavd with arguments "..."` or
    `no scx scheduler running`, from what the kernel runs; a scheduler loaded by anything else is
    `running OPS (not managed by scxctl)`.
    """
    st = client.call("status")
    owner = st["kernel"]["owner"]
    if owner == "scxctl":
        ui.line(f"running {running(st)}")
    elif owner == "other":
        ui.line(f"running {st['kernel']['ops'] or st['kernel']['state']} (not managed by scxctl)")
    else:
        ui.line("no scx scheduler running")
        if st["desired"]["enabled"]:
            ui.line(f"scxctl: note: {st['desired']['scheduler']} is enabled but not running: {st['summary']}",
                    stderr=True)


def start(sched: SchedOption, mode: ModeOption = None, args: ArgsOption = None) -> None:
    """Start a scheduler in a mode or with arguments (fails if one is enabled: use switch).

    With --args the scheduler runs in mode auto with those arguments (scx_loader's
    StartSchedulerWithArgs); they must pass the daemon's allow-list.
    """
    extra = split_args(args)
    if extra is not None and mode is not None:
        raise UsageError("the argument '--args' cannot be used with '--mode'")
    req: dict[str, Any] = {"scheduler": sched, "mode": Mode.auto.value if extra is not None else
                           (mode.value if mode else None)}
    if extra is not None:
        req["args"] = extra
    st = request("start", req, auto_start=True)
    ui.line(f"started {running(st)}")


def stop() -> None:
    """Stop the current scheduler (the kernel's default scheduler runs; remembered across boots)."""
    request("disable")
    ui.line("stopped")


def restart() -> None:
    """Restart the current scheduler with original configuration (fails if none is enabled)."""
    request("restart")
    ui.line("restarted")


def restore() -> None:
    """Restore the default scheduler from configuration (default_scheduler in default_mode)."""
    st = request("restore", auto_start=True)
    ui.line(f"restored default scheduler {running(st)}")


def modes() -> None:
    """List the modes a scheduler can be started or switched in."""
    names = ", ".join(f'"{m.value}"' for m in Mode)
    ui.line(f"supported modes: [{names}]")


def register(app: typer.Typer) -> None:
    app.command("get", rich_help_panel=PANEL)(get)
    app.command("start", rich_help_panel=PANEL)(start)
    app.command("stop", rich_help_panel=PANEL)(stop)
    app.command("restart", rich_help_panel=PANEL)(restart)
    app.command("restore", rich_help_panel=PANEL)(restore)
    app.command("modes", rich_help_panel=PANEL)(modes)
