"""Following power-profiles-daemon: its ActiveProfile, watched on the system bus.

power-profiles-daemon 0.20 and later (Debian trixie ships 0.30) own two names for one object:
org.freedesktop.UPower.PowerProfiles at /org/freedesktop/UPower/PowerProfiles (the current one) and
net.hadess.PowerProfiles at /net/hadess/PowerProfiles (the old one, kept for old clients; the only
one of 0.1x, e.g. Debian bookworm's 0.12). Both are watched, so either daemon works; a change that
arrives on both is one change. The service may be absent when the daemon starts, stop, or come
(back) later: NameOwnerChanged says so, and its profile is read when it appears.

The watcher only reports profiles (`on_profile`, one at a time, in order); what they mean for the
scheduler's mode is the daemon's decision (service.Daemon.follow_power_profile).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Self

from dbus_fast import DBusError, Message, MessageType
from dbus_fast.aio import MessageBus

from scxctl.daemon import polkit, sysbus
from scxctl.log import get_logger

log = get_logger("scxctl.daemon")

# (bus name, object path, interface), the preferred first
SERVICES: tuple[tuple[str, str, str], ...] = (
    ("org.freedesktop.UPower.PowerProfiles", "/org/freedesktop/UPower/PowerProfiles",
     "org.freedesktop.UPower.PowerProfiles"),
    ("net.hadess.PowerProfiles", "/net/hadess/PowerProfiles", "net.hadess.PowerProfiles"),
)
_DBUS = {"destination": "org.freedesktop.DBus", "path": "/org/freedesktop/DBus",
         "interface": "org.freedesktop.DBus"}


class PowerProfileWatcher:
    """Follows ActiveProfile over its own system-bus connection, connecting again when the bus
    goes away (dbus restarted): the profile is read afresh then, and a change missed meanwhile
    is seen as one."""

    def __init__(self, on_profile: Callable[[str], Awaitable[None]]) -> None:
        self.bus: MessageBus | None = None
        self.on_profile = on_profile
        self.owners: dict[str, str | None] = {name: None for name, _, _ in SERVICES}
        self.profile: str | None = None  # the last ActiveProfile seen; None while no service runs
        self.service: str | None = None  # the bus name it was last read from
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self._consumer: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, on_profile: Callable[[str], Awaitable[None]]) -> Self | None:
        """Watch the system bus; None (after one warning) when there is no bus to watch."""
        watcher = cls(on_profile)
        try:
            await watcher._connect()
        except Exception as exc:  # following is an extra: never a reason for the daemon not to start
            log.warning("power_profile_unavailable", scheduler=None, pid=None, reason=sysbus.why(exc),
                        action="not following the power profile")
            return None
        watcher._consumer = asyncio.create_task(watcher._consume())
        watcher._watch = asyncio.create_task(watcher._watch_disconnect())
        watcher._read_running("follow_power_profile")
        return watcher

    async def close(self) -> None:
        extra = [t for t in (self._consumer, self._watch) if t is not None]
        for task in [*self._tasks, *extra]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.bus is not None:
            self.bus.disconnect()

    async def _connect(self) -> None:
        """A connection with the match rules in place and the services' owners known; raises,
        connected to nothing."""
        bus: MessageBus | None = None
        try:
            bus = await sysbus.connect()
            bus.add_message_handler(self._on_message)
            self.bus = bus
            self.owners = {name: None for name, _, _ in SERVICES}
            # the rules first: no change can fall between them and the reads
            for name, path, interface in SERVICES:
                await self._bus_call("AddMatch", "s", [
                    "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
                    f"member='NameOwnerChanged',arg0='{name}'"])
                await self._bus_call("AddMatch", "s", [
                    "type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',"
                    f"path='{path}',arg0='{interface}'"])
            for name, _, _ in SERVICES:
                with contextlib.suppress(DBusError):  # NameHasNoOwner: not (yet) running
                    self.owners[name] = str((await self._bus_call("GetNameOwner", "s", [name]))[0])
        except BaseException:
            if bus is not None:
                bus.disconnect()
            raise

    def _read_running(self, reason: str) -> None:
        running = [n for n, owner in self.owners.items() if owner]
        log.info("power_profile_watching", scheduler=None, pid=None, reason=reason, services=running or None)
        if running:
            self._spawn(self._read(running[0]))

    async def _watch_disconnect(self) -> None:
        while True:
            assert self.bus is not None
            with contextlib.suppress(Exception):
                await self.bus.wait_for_disconnect()
            log.warning("power_profile_disconnected", scheduler=None, pid=None,
                        reason="the system bus closed the connection", action="connecting again")
            await sysbus.reconnect(self._connect)
            self._read_running("reconnected")

    # -- the bus -----------------------------------------------------------------------------------

    async def _bus_call(self, member: str, signature: str, body: list[Any]) -> list[Any]:
        assert self.bus is not None
        return await polkit.call(self.bus, Message(member=member, signature=signature, body=body, **_DBUS))

    async def _read(self, name: str) -> None:
        """ActiveProfile of the service `name` owns now."""
        _, path, interface = next(s for s in SERVICES if s[0] == name)
        try:
            assert self.bus is not None
            body = await polkit.call(self.bus, Message(
                destination=name, path=path, interface="org.freedesktop.DBus.Properties", member="Get",
                signature="ss", body=[interface, "ActiveProfile"]))
            value = body[0].value
        except (DBusError, TimeoutError, IndexError, AttributeError) as exc:
            log.warning("power_profile_unreadable", scheduler=None, pid=None, service=name,
                        reason=f"{type(exc).__name__}: {exc}")
            return
        if isinstance(value, str):
            self._seen(value, name)

    def _on_message(self, msg: Message) -> None:
        if msg.message_type is not MessageType.SIGNAL:
            return
        if msg.member == "NameOwnerChanged" and msg.sender == "org.freedesktop.DBus" and len(msg.body) == 3:
            name, _old, new = msg.body
            if name in self.owners:
                self._owner_changed(name, new or None)
        elif msg.member == "PropertiesChanged" and len(msg.body) == 3:
            interface, changed, invalidated = msg.body
            for name, path, iface in SERVICES:
                owner = self.owners[name]
                if owner is not None and (msg.sender, msg.path, interface) == (owner, path, iface):
                    if "ActiveProfile" in changed and isinstance(changed["ActiveProfile"].value, str):
                        self._seen(changed["ActiveProfile"].value, name)
                    elif "ActiveProfile" in invalidated:
                        self._spawn(self._read(name))

    def _owner_changed(self, name: str, owner: str | None) -> None:
        self.owners[name] = owner
        if owner is not None:
            log.info("power_profile_service_appeared", scheduler=None, pid=None, reason="NameOwnerChanged",
                     service=name)
            self._spawn(self._read(name))
        elif not any(self.owners.values()):
            log.info("power_profile_service_gone", scheduler=None, pid=None, reason="NameOwnerChanged",
                     service=name, action="the mode stays as it is until the service is back")
            self.profile = self.service = None

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- profiles, one at a time --------------------------------------------------------------------

    def _seen(self, profile: str, service: str) -> None:
        """A profile read or announced; a change (one service's echo of another's is none) is queued."""
        self.service = service
        if profile != self.profile:
            self.profile = profile
            self._queue.put_nowait(profile)

    async def _consume(self) -> None:
        while True:
            profile = await self._queue.get()
            try:
                await self.on_profile(profile)
            except Exception as exc:  # a bad reaction must not end the watching
                log.exception("power_profile_failed", scheduler=None, pid=None,
                              reason=f"{type(exc).__name__}: {exc}", profile=profile)
