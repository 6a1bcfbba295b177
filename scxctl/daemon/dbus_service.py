"""scx_loader's D-Bus interface, org.scx.Loader, served by the daemon on the system bus.

Desktop tools (kernel managers, game launchers) drive schedulers through it. Each method becomes a
request to the same Daemon.handle the control socket uses, so both front doors share one desired
state. The properties say what the kernel runs, not what was last asked for, and every change of
one is announced with PropertiesChanged. Mutating calls need polkit's org.scxctl.manage (polkit.py).

dbus-fast reads D-Bus signatures from annotations that must evaluate to strings: this module has no
`from __future__ import annotations`, and the annotations are the signature constants below.
"""

import asyncio
import contextlib
from typing import Any, Protocol, Self

from dbus_fast import DBusError, Message, MessageFlag, MessageType, NameFlag, RequestNameReply
from dbus_fast.aio import MessageBus
from dbus_fast.service import PropertyAccess, ServiceInterface, dbus_property, method

from scxctl.daemon import polkit, sysbus
from scxctl.daemon.arglist import ArgsRefused
from scxctl.daemon.config import DaemonConfig
from scxctl.daemon.modes import Mode
from scxctl.daemon.protocol import Request
from scxctl.daemon.server import Peer
from scxctl.daemon.state import DesiredState
from scxctl.daemon.supervisor import Supervisor
from scxctl.errors import ExitCode, ScxctlError
from scxctl.log import get_logger

log = get_logger("scxctl.daemon")

BUS_NAME = "org.scx.Loader"
PATH = "/org/scx/Loader"
INTERFACE = "org.scx.Loader"
ERROR = "org.scx.Loader.Error."
UNKNOWN = "unknown"  # scx_loader's CurrentScheduler when none runs

# scx_loader's SchedMode numbers (crates/scx_loader/src/lib.rs), spelled out: never the enum's order
MODE_NUMBERS: dict[Mode, int] = {
    Mode.auto: 0, Mode.gaming: 1, Mode.powersave: 2, Mode.lowlatency: 3, Mode.server: 4,
}
MODES_BY_NUMBER = {n: m for m, n in MODE_NUMBERS.items()}

S, U, AS = "s", "u", "as"  # D-Bus signatures, as dbus-fast's annotations

# mutating methods: name -> input signature; calls to them are answered by LoaderInterface.filter
METHODS: dict[str, str] = {
    "StartScheduler": "su",
    "StartSchedulerWithArgs": "sas",
    "SwitchScheduler": "su",
    "SwitchSchedulerWithArgs": "sas",
    "StopScheduler": "",
    "RestartScheduler": "",
    "RestoreDefault": "",
}


class Backend(Protocol):
    """What the interface needs of the daemon (service.Daemon)."""

    config: DaemonConfig
    state: DesiredState
    supervisor: Supervisor

    async def handle(self, req: Request, peer: Peer, persist: bool = True) -> Any: ...


def properties(config: DaemonConfig, supervisor: Supervisor) -> dict[str, Any]:
    """Every property's value now: the running scheduler as the kernel shows it.

    Ours (the daemon's live child, verified in sysfs): its configured name, mode and client
    arguments. Anyone else's: the kernel's root/ops name, mode 0, no arguments. None, or one only
    being enabled or disabled (a dead child's, on its way out): "unknown".
    """
    kernel = supervisor.kernel()
    spec = supervisor.spec
    current, mode, args = UNKNOWN, 0, []
    if spec is not None and supervisor.owns(kernel):
        current, mode, args = spec.scheduler, MODE_NUMBERS.get(Mode(spec.mode), 0), list(spec.args)
    elif kernel.enabled:
        current = kernel.ops or UNKNOWN
    return {
        "CurrentScheduler": current,
        "SchedulerMode": mode,
        "CurrentSchedulerArgs": args,
        "SupportedSchedulers": config.scheduler_names(),
        "DefaultScheduler": config.default_scheduler or UNKNOWN,
        "DefaultMode": MODE_NUMBERS[config.default_mode],
    }


def _error(name: str, text: str) -> DBusError:
    return DBusError(ERROR + name, text)


def dbus_error(exc: ScxctlError) -> DBusError:
    """The daemon's verdict as a D-Bus error: one line, the hint appended."""
    text = f"{exc.message}; {exc.hint}" if exc.hint else exc.message
    if isinstance(exc, ArgsRefused):
        return _error("ArgsNotAllowed", text)
    if exc.code == ExitCode.BUSY:
        return _error("Busy", text)
    if exc.code == ExitCode.UNSUPPORTED:
        return _error("Unsupported", text)
    if exc.code == ExitCode.PERMISSION:
        return DBusError(polkit.ACCESS_DENIED, text)
    return _error("Failed", text)


class LoaderInterface(ServiceInterface):
    """org.scx.Loader: the properties here; the methods are declared here for introspection and
    answered by `filter`, which has the caller's identity (dbus-fast does not pass it to methods)."""

    def __init__(self, backend: Backend, bus: MessageBus) -> None:
        super().__init__(INTERFACE)
        self.backend = backend
        self.bus = bus
        self.closing = False
        self._last = properties(backend.config, backend.supervisor)
        self._tasks: set[asyncio.Task[None]] = set()

    # -- properties: fresh on every read, and a read that finds a change announces it too ------

    def refresh(self) -> dict[str, Any]:
        """The properties now; PropertiesChanged for those that differ from the last announced."""
        values = properties(self.backend.config, self.backend.supervisor)
        changed = {k: v for k, v in values.items() if self._last.get(k) != v}
        self._last = values
        if changed and self.bus.connected:
            self.emit_properties_changed(changed)
        return values

    @dbus_property(access=PropertyAccess.READ)
    def CurrentScheduler(self) -> S:
        return self.refresh()["CurrentScheduler"]

    @dbus_property(access=PropertyAccess.READ)
    def SchedulerMode(self) -> U:
        return self.refresh()["SchedulerMode"]

    @dbus_property(access=PropertyAccess.READ)
    def CurrentSchedulerArgs(self) -> AS:
        return self.refresh()["CurrentSchedulerArgs"]

    @dbus_property(access=PropertyAccess.READ)
    def SupportedSchedulers(self) -> AS:
        return self.refresh()["SupportedSchedulers"]

    @dbus_property(access=PropertyAccess.READ)
    def DefaultScheduler(self) -> S:
        return self.refresh()["DefaultScheduler"]

    @dbus_property(access=PropertyAccess.READ)
    def DefaultMode(self) -> U:
        return self.refresh()["DefaultMode"]

    # -- methods: declared for introspection; `filter` answers every call first ------------------

    @method()
    def StartScheduler(self, scx_name: S, sched_mode: U) -> None:
        raise _error("Failed", "not dispatched")

    @method()
    def StartSchedulerWithArgs(self, scx_name: S, scx_args: AS) -> None:
        raise _error("Failed", "not dispatched")

    @method()
    def SwitchScheduler(self, scx_name: S, sched_mode: U) -> None:
        raise _error("Failed", "not dispatched")

    @method()
    def SwitchSchedulerWithArgs(self, scx_name: S, scx_args: AS) -> None:
        raise _error("Failed", "not dispatched")

    @method()
    def StopScheduler(self) -> None:
        raise _error("Failed", "not dispatched")

    @method()
    def RestartScheduler(self) -> None:
        raise _error("Failed", "not dispatched")

    @method()
    def RestoreDefault(self) -> None:
        raise _error("Failed", "not dispatched")

    def filter(self, msg: Message) -> bool | None:
        """Claim a call of a mutating method with the right signature; anything else (a wrong
        signature included) goes on to dbus-fast, which refuses what it does not know."""
        if (
            msg.message_type is not MessageType.METHOD_CALL
            or msg.path != PATH
            or msg.interface not in (INTERFACE, None)
            or METHODS.get(msg.member or "") != msg.signature
        ):
            return None
        task = asyncio.ensure_future(self._answer(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _answer(self, msg: Message) -> None:
        try:
            await self._call(msg)
            reply = Message.new_method_return(msg)
        except DBusError as exc:
            reply = Message.new_error(msg, exc.type, exc.text)
        except Exception as exc:  # nothing a caller sends may reach the event loop
            log.exception("dbus_call_failed", method=msg.member, error=f"{type(exc).__name__}: {exc}")
            reply = Message.new_error(msg, ERROR + "Failed", f"internal daemon error: {type(exc).__name__}")
        if not msg.flags & MessageFlag.NO_REPLY_EXPECTED and self.bus.connected:
            self.bus.send(reply)

    async def _call(self, msg: Message) -> None:
        sender, member = msg.sender or "", msg.member or ""
        try:
            uid = await polkit.caller_uid(self.bus, sender)
        except (DBusError, TimeoutError) as exc:
            raise DBusError(polkit.ACCESS_DENIED, f"the bus cannot say who calls ({exc}); refused") from None
        peer = Peer(await polkit.caller_pid(self.bus, sender), uid, -1)
        try:
            await polkit.authorise(self.bus, sender, uid)
        except DBusError as exc:
            log.warning("request_denied", op=member, uid=uid, pid=peer.pid, sender=sender, reason=exc.text)
            raise
        if self.closing:
            raise _error("Failed", "the daemon is stopping")
        log.info("dbus_call", method=member, sender=sender, uid=uid, pid=peer.pid)
        try:
            await self._do(member, list(msg.body), peer)
        except ScxctlError as exc:
            raise dbus_error(exc) from None

    async def _do(self, member: str, body: list[Any], peer: Peer) -> None:
        config, handle = self.backend.config, self.backend.handle
        if member == "StopScheduler":
            await handle(Request("disable"), peer)
        elif member == "RestartScheduler":
            if not self.backend.state.enabled:
                raise _error("NotRunning", "no scheduler is enabled, so none can be restarted")
            await handle(Request("restart"), peer)
        elif member == "RestoreDefault":
            if not config.default_scheduler:
                raise _error("NoDefault", "no default scheduler is configured (default_scheduler is \"\")")
            await handle(Request("restore"), peer)
        elif member.endswith("WithArgs"):  # scx_loader runs a scheduler given arguments in mode auto
            await self._start(body[0], Mode.auto, body[1], peer)
        else:
            if body[1] not in MODES_BY_NUMBER:
                raise _error("UnknownMode", f"unknown mode {body[1]} (modes: 0 auto, 1 gaming, 2 powersave, "
                                            "3 lowlatency, 4 server)")
            await self._start(body[0], MODES_BY_NUMBER[body[1]], None, peer)

    async def _start(self, name: str, mode: Mode, args: list[str] | None, peer: Peer) -> None:
        """Start and Switch alike: the daemon's enable replaces whatever runs (scx_loader's switch)."""
        names = self.backend.config.scheduler_names()
        if self.backend.config.resolve(name) not in names:
            raise _error("UnknownScheduler",
                         f"unknown scheduler {name[:64]!r} (supported: {', '.join(names)})")
        req: dict[str, Any] = {"scheduler": name, "mode": mode.value}
        if args is not None:
            req["args"] = args
        await self.backend.handle(Request("enable", req), peer)


class LoaderService:
    """The daemon's connection to the system bus: export, own the name, follow changes, let go.

    A bus that goes away (dbus restarted or upgraded) is waited out: the daemon connects again
    with a growing pause and owns the name again, while the control socket serves meanwhile.
    """

    def __init__(self, backend: Backend, bus: MessageBus, interface: LoaderInterface) -> None:
        self.backend = backend
        self.bus = bus
        self.interface = interface
        self.closing = False
        self._watch: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, backend: Backend) -> Self | None:
        """Serve org.scx.Loader; None (after one warning) when the bus or the name is not to be had."""
        try:
            bus, interface = await cls._connect(backend)
        except Exception as exc:  # D-Bus is an extra front door: never a reason not to start
            log.warning("dbus_unavailable", scheduler=None, pid=None, reason=sysbus.why(exc),
                        action="serving the control socket only")
            return None
        service = cls(backend, bus, interface)
        service._watch = asyncio.create_task(service._watch_disconnect())
        log.info("dbus_serving", scheduler=None, pid=None, reason="start", name=BUS_NAME, path=PATH)
        return service

    @staticmethod
    async def _connect(backend: Backend) -> tuple[MessageBus, LoaderInterface]:
        """A connection that exports the interface and owns the name; raises, connected to nothing."""
        bus: MessageBus | None = None
        try:
            bus = await sysbus.connect()
            interface = LoaderInterface(backend, bus)
            bus.export(PATH, interface)
            bus.add_message_handler(interface.filter)
            reply = await asyncio.wait_for(
                bus.request_name(BUS_NAME, NameFlag.DO_NOT_QUEUE), sysbus.CONNECT_TIMEOUT_S
            )
            if reply not in (RequestNameReply.PRIMARY_OWNER, RequestNameReply.ALREADY_OWNER):
                raise DBusError("org.freedesktop.DBus.Error.AddressInUse",
                                f"{BUS_NAME} is owned by another service (scx_loader?)")
        except BaseException:
            if bus is not None:
                bus.disconnect()
            raise
        return bus, interface

    def changed(self) -> None:
        """Something the properties follow may have changed: announce what did."""
        try:
            self.interface.refresh()
        except Exception as exc:  # a notification must never break the caller (the supervisor)
            log.warning("dbus_notify_failed", error=f"{type(exc).__name__}: {exc}")

    def refuse_changes(self) -> None:
        """From now on every mutating call fails: the daemon is stopping."""
        self.closing = self.interface.closing = True

    async def close(self) -> None:
        """Announce the last state (the scheduler stopped), then leave the bus."""
        self.refuse_changes()
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if not self.bus.connected:
            return
        self.changed()
        get_id = Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                         interface="org.freedesktop.DBus", member="GetId")
        with contextlib.suppress(Exception):  # a round trip: the signals queued before it are out
            await polkit.call(self.bus, get_id, 2.0)
        self.bus.disconnect()

    async def _watch_disconnect(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.bus.wait_for_disconnect()
            log.warning("dbus_disconnected", scheduler=None, pid=None,
                        reason="the system bus closed the connection",
                        action="connecting again; the control socket serves meanwhile")
            await self._reconnect()

    async def _reconnect(self) -> None:
        """Connect again until it works (sysbus.reconnect); one line when it does."""
        async def attempt() -> None:
            self.bus, self.interface = await self._connect(self.backend)

        tries, last = await sysbus.reconnect(attempt)
        self.interface.closing = self.closing
        log.info("dbus_serving", scheduler=None, pid=None, reason="reconnected", name=BUS_NAME,
                 path=PATH, tries=tries, last_error=last)
        self.changed()  # clients that watched the old connection learn the state now
