"""The daemon's connections to the system bus (the D-Bus service and the power-profile watcher):
how long a connection may take, how long to wait before connecting again after the bus went away,
and how a failure reads in the log."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from dbus_fast import BusType, DBusError
from dbus_fast.aio import MessageBus

CONNECT_TIMEOUT_S = 5.0
# After the bus went away (dbus restarted or upgraded): short pauses first, as a restart takes a
# moment, then one try every 30 s for as long as it takes.
RECONNECT_PAUSES_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


async def connect() -> MessageBus:
    return await asyncio.wait_for(MessageBus(bus_type=BusType.SYSTEM).connect(), CONNECT_TIMEOUT_S)


async def reconnect(attempt: Callable[[], Awaitable[None]]) -> tuple[int, str | None]:
    """Runs `attempt` until it returns, after each of RECONNECT_PAUSES_S (the last one repeated):
    (the number of tries, why the last failed try failed). Nothing is logged per failed try: a bus
    down for an hour would otherwise fill the journal."""
    tries, last = 0, None
    while True:
        await asyncio.sleep(RECONNECT_PAUSES_S[min(tries, len(RECONNECT_PAUSES_S) - 1)])
        tries += 1
        try:
            await attempt()
        except Exception as exc:
            last = why(exc)
            continue
        return tries, last


def why(exc: BaseException) -> str:
    return f"{exc.type}: {exc.text}" if isinstance(exc, DBusError) else f"{type(exc).__name__}: {exc}"
