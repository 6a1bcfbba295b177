"""The daemon proper: config + state + supervisor + control server, start-up and shut-down.

Request handling lives here: each mutating request is validated against the config (clients name
a scheduler, a mode and for pyland a policy, never a program or its flags), persisted, then handed
to the supervisor; the reply is the status as the kernel reports it afterwards. The status line's
wording is in status_text.py, the `list` reply in listing.py. The same requests come from the
control socket (server.py) and from scx_loader's D-Bus interface (dbus_service.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scxctl import __version__, paths
from scxctl.daemon import notify, protocol
from scxctl.daemon.arglist import check_args, pyland_patterns
from scxctl.daemon.config import PYLAND, ConfigError, DaemonConfig, load_config
from scxctl.daemon.exitinfo import ExitInfo
from scxctl.daemon.listing import listing
from scxctl.daemon.metrics import Facts, MetricsWriter
from scxctl.daemon.modes import PYLAND_MODES, Mode, parse_mode
from scxctl.daemon.protocol import Request
from scxctl.daemon.server import ControlServer, Peer
from scxctl.daemon.state import DesiredState, StateError, load_state, quarantine, save_state
from scxctl.daemon.status_text import summary
from scxctl.daemon.supervisor import ChildSpec, Supervisor
from scxctl.errors import ExitCode, ScxctlError, UsageError
from scxctl.log import get_logger
from scxctl.pyland.cgroup_report import read_snapshot
from scxctl.pyland.stats_report import read_stats, stale_reason
from scxctl.sysfs import (
    STATE_DISABLED,
    SchedExtStatus,
    SysRoot,
    read_sched_ext_events,
    sysrq_reset_sched_ext,
)

if TYPE_CHECKING:
    from scxctl.daemon.dbus_service import LoaderService
    from scxctl.daemon.power_profile import PowerProfileWatcher

log = get_logger("scxctl.daemon")

_ROOT = Peer(os.getpid(), 0, 0)  # the daemon itself, when it restores the saved state


def pyland_argv(options: list[str]) -> tuple[str, ...]:
    """`scxctl run pyland` with this interpreter: the daemon runs the pyland it was installed with."""
    return (sys.executable, "-m", "scxctl", "--log-format", "json", "run", "pyland", *options)


class Daemon:
    def __init__(
        self,
        config_path: Path | None = None,
        state_path: Path | None = None,
        socket_path: Path | None = None,
        sysroot: SysRoot | None = None,
    ) -> None:
        self.config_path = config_path or paths.config_file()
        self.state_path = state_path or paths.state_file()
        self.socket_path = socket_path or paths.control_socket()
        self.sysroot = sysroot or SysRoot()
        self.config = DaemonConfig()
        self.config_error: str | None = None
        self.state = DesiredState()
        self.state_error: str | None = None
        self.started_at = time.time()
        self.supervisor = Supervisor(
            self.config.limits, self.sysroot, self._on_exit, self._on_give_up, self._changed
        )
        self.server = ControlServer(self.socket_path, self.handle, lambda: self.config.group)
        self._lock: asyncio.Lock | None = None
        self._stop: asyncio.Event | None = None
        self.metrics: MetricsWriter | None = None
        self.dbus: LoaderService | None = None
        self.power: PowerProfileWatcher | None = None

    # -- start-up and shut-down -------------------------------------------------------------

    def load(self) -> None:
        """Read config and state; anything unusable is logged and replaced by a safe default."""
        try:
            self.config = load_config(self.config_path)
        except ConfigError as exc:
            self.config_error = str(exc)
            self.config = DaemonConfig(restore_on_boot=False)
            log.error(
                "config_invalid",
                scheduler=None,
                pid=None,
                reason=str(exc),
                action="using built-in defaults; nothing restored until the file is fixed",
            )
        try:
            self.state = load_state(self.state_path)
        except StateError as exc:
            moved = quarantine(self.state_path)
            self.state_error = str(exc)
            self.state = DesiredState()
            log.error(
                "state_invalid",
                scheduler=None,
                pid=None,
                reason=str(exc),
                moved_to=str(moved) if moved else None,
                action="starting with no scheduler enabled",
            )
        self.supervisor.limits = self.config.limits
        try:
            grp.getgrnam(self.config.group)
        except KeyError:
            log.warning(
                "group_missing",
                group=self.config.group,
                reason="only root can change state until the group exists",
            )

    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT; then stop the child cleanly and return 0."""
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        self.load()
        await self.server.start()
        self.dbus = await self._start_dbus()
        self.power = await self._start_power_profile()
        log.info(
            "daemon_started",
            scheduler=None,
            pid=os.getpid(),
            reason="start",
            version=__version__,
            socket=str(self.socket_path),
            config=str(self.config_path),
            state=str(self.state_path),
        )
        notify.notify(READY=1, STATUS="serving", MAINPID=os.getpid())
        heartbeat = asyncio.create_task(self._heartbeat())
        self.metrics = MetricsWriter(self.config.metrics, self._metrics_facts)
        self.metrics.retire_previous(self.state_path.with_name("metrics-file"))
        metrics = asyncio.create_task(self.metrics.run())
        restore = asyncio.create_task(self._restore())
        await self._stop.wait()
        log.info(
            "daemon_stopping",
            scheduler=self.supervisor.spec.scheduler if self.supervisor.spec else None,
            pid=os.getpid(),
            reason="signal",
        )
        notify.notify(STOPPING=1, STATUS="stopping the scheduler")
        restore.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await restore
        if self.dbus is not None:
            self.dbus.refuse_changes()
        await self.server.close()
        await self.supervisor.stop("daemon_shutdown")
        if self.dbus is not None:
            await self.dbus.close()
        if self.power is not None:
            await self.power.close()
        for task in (heartbeat, metrics):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.metrics.write_once()  # the last word: the scheduler is down, not frozen at "up"
        log.info("daemon_stopped", scheduler=None, pid=os.getpid(), reason="signal")
        return 0

    async def _start_dbus(self) -> LoaderService | None:
        """org.scx.Loader on the system bus, when configured and to be had; never fatal."""
        if not self.config.dbus.enabled:
            log.info("dbus_disabled", scheduler=None, pid=None, reason="[dbus] enabled = false")
            return None
        try:
            from scxctl.daemon.dbus_service import LoaderService
        except ImportError as exc:
            log.warning("dbus_unavailable", scheduler=None, pid=None, reason=f"dbus-fast: {exc}",
                        action="serving the control socket only")
            return None
        return await LoaderService.start(self)

    async def _start_power_profile(self) -> PowerProfileWatcher | None:
        """Watch power-profiles-daemon when follow_power_profile is on; never fatal."""
        if not self.config.follow_power_profile:
            return None
        try:
            from scxctl.daemon.power_profile import PowerProfileWatcher
        except ImportError as exc:
            log.warning("power_profile_unavailable", scheduler=None, pid=None, reason=f"dbus-fast: {exc}",
                        action="not following the power profile")
            return None
        return await PowerProfileWatcher.start(self.follow_power_profile)

    def _profile_mode(self) -> Mode | None:
        """The mode the power profile asks for, while following and a profile is known and mapped."""
        if self.power is None or self.power.profile is None:
            return None
        return self.config.power_profile_modes.get(self.power.profile)

    def _auto_mode(self) -> Mode:
        """The mode when no client chose one: the power profile's while following, else default_mode."""
        return self._profile_mode() or self.config.default_mode

    async def follow_power_profile(self, profile: str) -> None:
        """power-profiles-daemon's ActiveProfile changed: switch the mode to the profile's, unless a
        client chose the mode (or arguments) since the last enable without a mode, or restore."""
        mode = self.config.power_profile_modes.get(profile)
        state = self.state
        fields = {"scheduler": state.scheduler if state.enabled else None, "pid": None, "profile": profile,
                  "mode": mode.value if mode else None}
        if mode is None:
            log.info("power_profile_ignored", reason="no mode for this profile in power_profile_modes",
                     **fields)
            return
        assert self._lock is not None
        try:
            async with self._lock:
                state = self.state
                if not state.enabled or not state.scheduler:
                    log.info("power_profile_ignored", reason="no scheduler enabled", **fields)
                    return
                if state.mode_source == "explicit":
                    log.info("power_profile_held", reason="a mode or arguments were chosen explicitly; "
                             "they hold until an enable without a mode, or restore", held_mode=state.mode,
                             **fields)
                    return
                if state.mode == mode.value:
                    return
                log.info("power_profile_switch", reason="power profile changed", previous_mode=state.mode,
                         **fields)
                try:
                    req = Request("switch", {"mode": mode.value})
                    await self._enable(req, _ROOT, True, mode_source="auto")
                except ScxctlError as exc:
                    log.warning("power_profile_switch_failed", reason=exc.message, code=exc.code.name,
                                **fields)
        finally:
            self._changed()

    def _changed(self) -> None:
        """What the kernel runs, or what was asked for, may have changed: tell the D-Bus clients."""
        if self.dbus is not None:
            self.dbus.changed()

    async def _restore(self) -> None:
        state = self.state
        if not state.enabled or not state.scheduler:
            # said out loud: a start-up that decided to restore nothing is then told apart, in the
            # log, from one that has not decided yet
            log.info("restore_skipped", scheduler=None, pid=None, reason="nothing enabled")
            return
        if not self.config.restore_on_boot:
            log.info(
                "restore_skipped",
                scheduler=state.scheduler,
                pid=None,
                reason="restore_on_boot is off" if not self.config_error else "config invalid",
            )
            return
        args = {"scheduler": state.scheduler, "mode": state.mode, "policy": state.policy, "force": False,
                "args": state.args}
        try:
            await self.handle(Request("enable", args), _ROOT, persist=False)
            log.info(
                "restored",
                scheduler=state.scheduler,
                pid=self.supervisor.snapshot()["pid"],
                reason="desired state at start-up",
                mode=state.mode,
            )
        except ScxctlError as exc:
            log.error(
                "restore_failed", scheduler=state.scheduler, pid=None, reason=exc.message, code=exc.code.name
            )

    async def _heartbeat(self) -> None:
        """WATCHDOG=1 from the event loop itself (a stuck loop stops pinging), plus a STATUS line."""
        interval = notify.watchdog_interval()
        period = min(interval / 2, 5.0) if interval else 5.0
        last = ""
        while True:
            self._changed()  # the one periodic look at the kernel while no child is watched
            line = self.status()["summary"]
            fields: dict[str, str | int] = {"WATCHDOG": 1} if interval else {}
            if line != last:
                fields["STATUS"] = line
                last = line
            if fields:
                notify.notify(**fields)
            await asyncio.sleep(period)

    def _metrics_facts(self) -> Facts:
        """What the metrics file shows now; pyland's counters only from our own child's live snapshot."""
        st = self.status()
        sup = st["supervisor"]
        pyland = None
        if st["kernel"]["owner"] == "scxctl" and sup["scheduler"] == PYLAND and sup["pid"]:
            doc = read_stats(sup["pid"])
            pyland = doc if doc is not None and stale_reason(doc) is None else None
        try:
            release = self.sysroot.kernel_release()
        except OSError:
            release = "unknown"
        return Facts(st, self.supervisor.counts, release, read_sched_ext_events(self.sysroot), pyland,
                     time.monotonic() - self.supervisor.counts.changed_at)

    # -- persistence callbacks from the supervisor --------------------------------------------

    def _save(self) -> None:
        try:
            save_state(self.state_path, self.state)
        except OSError as exc:
            log.error("state_write_failed", scheduler=self.state.scheduler, pid=None, reason=str(exc))

    def _on_exit(self, info: ExitInfo) -> None:
        self.state.last_exit = info.to_json()
        self._save()

    def _on_give_up(self, gave_up: dict[str, Any]) -> None:
        self.state.gave_up = gave_up
        self._save()
        notify.notify(STATUS=f"gave up: {gave_up['reason']}")

    # -- requests -------------------------------------------------------------------------------

    async def handle(self, req: Request, peer: Peer, persist: bool = True) -> Any:
        if req.op == "ping":
            return {"pong": True, "version": __version__, "protocol": protocol.VERSION, "pid": os.getpid()}
        if req.op == "status":
            return self.status()
        if req.op == "list":
            return listing(self.config)
        assert self._lock is not None
        try:
            async with self._lock:
                if req.op == "disable":
                    return await self._disable(peer)
                if req.op == "restart":
                    return await self._restart(peer)
                if req.op == "restore":
                    return await self._restore_default(peer)
                return await self._enable(req, peer, persist)
        finally:
            self._changed()

    def _arg(self, req: Request, key: str, kind: type) -> Any:
        value = req.args.get(key)
        if value is not None and (
            not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool)
        ):
            raise UsageError(f"{key}: expected {kind.__name__}")
        return value

    def _spec(self, scheduler: str, mode: Mode, policy: str | None, peer: Peer, args: Any) -> ChildSpec:
        if scheduler == PYLAND:
            if policy is not None and policy not in self.config.pyland_policies:
                if not (peer.uid == 0 and os.path.isabs(policy)):
                    raise UsageError(
                        f"policy {policy!r} is not allowed (allowed: {', '.join(self.config.pyland_policies)}"
                        "; root may also give an absolute policy file path)"
                    )
                if not os.path.isfile(policy):
                    raise UsageError(f"policy file {policy} does not exist")
            extra = check_args(args, pyland_patterns(self.config.pyland_policies), f"pyland in mode {mode}")
            # the client's arguments come last: pyland's options take the last value given
            argv = pyland_argv([*PYLAND_MODES[mode].argv(policy), *extra])
            chosen = [a.removeprefix("--policy=") for a in extra if a.startswith("--policy=")]
            policy = chosen[-1] if chosen else policy or PYLAND_MODES[mode].policy
            return ChildSpec(PYLAND, argv, self.config.pyland_ops, mode.value, policy, args=extra)
        ext = self.config.schedulers.get(scheduler)
        if ext is None:
            raise UsageError(
                f"unknown scheduler {scheduler!r} (configured: {', '.join(self.config.scheduler_names())})",
                hint=f"external schedulers must be allow-listed in {self.config_path}",
            )
        if policy is not None:
            raise UsageError("--policy applies to pyland only")
        extra = check_args(args, ext.allowed_args.get(mode.value, ()), f"{scheduler} in mode {mode}")
        argv = (*ext.argv(mode), *extra)
        return ChildSpec(scheduler, argv, ext.ops, mode.value, None, ext.stop_signal, extra)

    async def _enable(self, req: Request, peer: Peer, persist: bool, mode_source: str | None = None
                      ) -> dict[str, Any]:
        scheduler, mode, policy, source = self._requested(req, mode_source)
        force = bool(self._arg(req, "force", bool))
        args = req.args.get("args")
        spec = self._spec(scheduler, mode, policy, peer, [] if args is None else args)
        kernel = await self._make_room(force, peer)
        if persist:
            self.state = DesiredState(True, scheduler, mode.value, policy, time.time(), peer.uid,
                                      args=list(spec.args), mode_source=source)
            self._save()
        log.info("enable_requested", scheduler=scheduler, pid=None, reason=req.op, mode=mode.value,
                 policy=policy, uid=peer.uid, force=force)
        if self.supervisor.spec == spec and self.supervisor.owns(kernel):
            return self.status()  # already running exactly this: no needless restart
        await self.supervisor.start(spec)
        wait = self.config.limits.verify_timeout_s + self.config.limits.stop_timeout_s + 5
        try:
            outcome = await self.supervisor.first_outcome(wait)
        except TimeoutError:
            outcome = None
        if outcome is not None:
            raise ScxctlError(
                f"{scheduler} failed to start: {outcome.kind}: {outcome.reason}",
                hint="the daemon retries with backoff; `scxctl logs` shows why; `scxctl disable` stops it",
            )
        return self.status()

    def _requested(self, req: Request, mode_source: str | None) -> tuple[str, Mode, str | None, str]:
        """(scheduler, mode, policy, mode source) a start, switch or enable asks for, with what it
        leaves out taken from what runs (switch) or the config's defaults."""
        current = self.state if self.state.enabled else None
        scheduler = self._arg(req, "scheduler", str)
        mode_name = self._arg(req, "mode", str)
        policy = self._arg(req, "policy", str)
        # a mode (or arguments) the client chose holds against the power profile; see follow_power_profile
        source = mode_source or ("explicit" if mode_name is not None or req.args.get("args") else "auto")
        keep_mode = bool(self._arg(req, "keep_mode", bool))
        if scheduler is not None:
            scheduler = self.config.resolve(scheduler)
        if req.op == "start" and current is not None:
            raise UsageError(
                f"a scheduler is already enabled ({current.scheduler}, mode {current.mode}): "
                "use 'switch' instead of 'start'",
                hint="scxctl switch -s SCHED [-m MODE]",
            )
        if req.op == "switch":
            if current is None:
                raise UsageError("nothing is enabled to switch from: use 'start' (or 'enable') instead",
                                 hint="scxctl start -s SCHED")
            if scheduler is None and mode_name is None and policy is None:
                raise UsageError("switch needs a scheduler or --mode")
            if scheduler is None:
                scheduler = current.scheduler
                policy = policy if policy is not None else current.policy
            # scx_loader's `switch -s SCHED` keeps the mode (keep_mode); ours takes the default for
            # another scheduler
            if mode_name is None and (scheduler == current.scheduler or keep_mode):
                mode_name, source = current.mode, mode_source or current.mode_source  # carried over
        scheduler = scheduler or self.config.default_scheduler
        if not scheduler:
            raise UsageError("no scheduler named, and the config has no default_scheduler")
        try:
            mode = parse_mode(mode_name) if mode_name else self._auto_mode()
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if scheduler != PYLAND:
            policy = None if req.op == "switch" and req.args.get("policy") is None else policy
        return scheduler, mode, policy, source

    async def _make_room(self, force: bool, peer: Peer) -> SchedExtStatus:
        """Refuse a kernel without sched_ext; unload a scheduler scxctl did not start only when forced.
        The kernel's state as read before any unload."""
        kernel = self.supervisor.kernel()
        if not kernel.available:
            raise ScxctlError(
                "this kernel cannot run sched_ext schedulers (no /sys/kernel/sched_ext)",
                ExitCode.UNSUPPORTED,
                hint="boot a kernel with CONFIG_SCHED_CLASS_EXT=y",
            )
        if self._foreign(kernel):
            if not force:
                raise ScxctlError(
                    f"another sched_ext scheduler is loaded ({kernel.ops or kernel.state}), "
                    "not started by scxctl",
                    ExitCode.BUSY,
                    hint="--force unloads it (SysRq-S)",
                )
            await self._evict(kernel, peer)
        return kernel

    async def _restart(self, peer: Peer) -> dict[str, Any]:
        """Stop and start again what the desired state names (a fresh failure budget)."""
        state = self.state
        if not state.enabled or not state.scheduler:
            raise UsageError("nothing is enabled to restart")
        log.info("restart_requested", scheduler=state.scheduler, pid=self.supervisor.snapshot()["pid"],
                 reason="restart", uid=peer.uid)
        await self.supervisor.stop("restart")
        args = {"scheduler": state.scheduler, "mode": state.mode, "policy": state.policy, "args": state.args}
        return await self._enable(Request("enable", args), peer, persist=False)

    async def _restore_default(self, peer: Peer) -> dict[str, Any]:
        """The configured default scheduler in the default mode (scx_loader's RestoreDefault)."""
        if not self.config.default_scheduler:
            raise UsageError(
                'no default scheduler is configured (default_scheduler is "")',
                hint=f"set default_scheduler in {self.config_path}",
            )
        req = Request("restore", {"scheduler": self.config.default_scheduler})
        return await self._enable(req, peer, True)

    def _foreign(self, kernel: SchedExtStatus) -> bool:
        """Does the kernel run a scheduler that is not our live child?"""
        loaded = bool(kernel.ops) or (kernel.state not in (None, STATE_DISABLED))
        return loaded and not self.supervisor.owns(kernel)

    async def _evict(self, kernel: SchedExtStatus, peer: Peer) -> None:
        log.warning(
            "foreign_scheduler_evicted", scheduler=kernel.ops, pid=None, reason="--force", uid=peer.uid
        )
        try:
            sysrq_reset_sched_ext(self.sysroot)
        except OSError as exc:
            raise ScxctlError(
                f"cannot unload the other scheduler: {exc.strerror or exc}", ExitCode.BUSY
            ) from None
        deadline = time.monotonic() + 5.0
        while self._foreign(self.supervisor.kernel()):
            if time.monotonic() > deadline:
                raise ScxctlError("the other scheduler is still loaded 5 s after SysRq-S", ExitCode.BUSY)
            await asyncio.sleep(0.05)

    async def _disable(self, peer: Peer) -> dict[str, Any]:
        log.info(
            "disable_requested",
            scheduler=self.state.scheduler,
            pid=self.supervisor.snapshot()["pid"],
            reason="disable",
            uid=peer.uid,
        )
        self.state = DesiredState(
            False, None, None, None, time.time(), peer.uid, last_exit=self.state.last_exit
        )
        self._save()
        await self.supervisor.stop("disabled")
        return self.status()

    # -- the status reply -----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        kernel = self.supervisor.kernel()
        sup = self.supervisor.snapshot()
        ours = self.supervisor.owns(kernel)
        loaded = kernel.enabled or bool(kernel.ops)
        owner = "scxctl" if ours else ("other" if loaded else None)
        return {
            "summary": summary(kernel, sup, owner),
            "kernel": {
                "sched_ext": kernel.available,
                "state": kernel.state,
                "ops": kernel.ops,
                "owner": owner,
            },
            "desired": {
                "enabled": self.state.enabled,
                "scheduler": self.state.scheduler,
                "mode": self.state.mode,
                "policy": self.state.policy,
                "args": self.state.args,
                "mode_source": self.state.mode_source,
                "updated_at": self.state.updated_at or None,
                "updated_by_uid": self.state.updated_by_uid,
            },
            "supervisor": sup,
            "power_profile": {
                "follow": self.config.follow_power_profile,
                "watching": self.power is not None,
                "profile": self.power.profile if self.power else None,
                "service": self.power.service if self.power else None,
                "mode": m.value if (m := self._profile_mode()) else None,
            },
            # what the running pyland enforces of cpu.max (its own snapshot; null when none)
            "cgroups": read_snapshot(sup["pid"]) if ours and sup["pid"] else None,
            "daemon": {
                "pid": os.getpid(),
                "version": __version__,
                "uptime_s": round(time.time() - self.started_at, 1),
                "config_file": str(self.config_path),
                "config_error": self.config_error,
                "state_error": self.state_error,
                "group": self.config.group,
            },
        }
