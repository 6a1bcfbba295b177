"""Who may change state over D-Bus: root, or a caller polkit allows `org.scxctl.manage`.

polkit is asked without user interaction, so a script never hangs on a password prompt (the
packaged rules let the scxctl group in without one). Root is allowed without asking, so that root
still works where polkit is not installed. Every other outcome, an unreachable or failing polkit
included, is a refusal: the daemon never fails open.
"""

from __future__ import annotations

import asyncio

from dbus_fast import DBusError, Message, MessageType, Variant
from dbus_fast.aio import MessageBus

ACTION = "org.scxctl.manage"
ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
CALL_TIMEOUT_S = 10.0  # no interaction: polkit answers at once, or something is wrong with it

_NO_INTERACTION = 0  # CheckAuthorization flags: AllowUserInteraction (1) not set


async def call(bus: MessageBus, msg: Message, timeout: float = CALL_TIMEOUT_S) -> list:
    """The reply's body; DBusError for an error reply, TimeoutError when none comes."""
    reply = await asyncio.wait_for(bus.call(msg), timeout)
    if reply is None:
        raise DBusError("org.freedesktop.DBus.Error.NoReply", "no reply")
    if reply.message_type is MessageType.ERROR:
        text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
        raise DBusError(reply.error_name or "org.freedesktop.DBus.Error.Failed", text)
    return list(reply.body)


async def _bus_query(bus: MessageBus, member: str, sender: str) -> int:
    body = await call(bus, Message(
        destination="org.freedesktop.DBus", path="/org/freedesktop/DBus", interface="org.freedesktop.DBus",
        member=member, signature="s", body=[sender]))
    return int(body[0])


async def caller_uid(bus: MessageBus, sender: str) -> int:
    """The caller's uid as the bus daemon recorded it when the caller connected."""
    return await _bus_query(bus, "GetConnectionUnixUser", sender)


async def caller_pid(bus: MessageBus, sender: str) -> int:
    """The caller's pid, for the log only (0 when the bus cannot tell)."""
    try:
        return await _bus_query(bus, "GetConnectionUnixProcessID", sender)
    except (DBusError, TimeoutError):
        return 0


async def authorise(bus: MessageBus, sender: str, uid: int) -> None:
    """Return when `sender` (uid `uid`) may change state; DBusError AccessDenied otherwise."""
    if uid == 0:
        return
    subject = ["system-bus-name", {"name": Variant("s", sender)}]
    msg = Message(
        destination="org.freedesktop.PolicyKit1",
        path="/org/freedesktop/PolicyKit1/Authority",
        interface="org.freedesktop.PolicyKit1.Authority",
        member="CheckAuthorization",
        signature="(sa{sv})sa{ss}us",
        body=[subject, ACTION, {}, _NO_INTERACTION, ""],
    )
    try:
        body = await call(bus, msg)
        authorised, challenge = bool(body[0][0]), bool(body[0][1])
    except (DBusError, TimeoutError, IndexError, TypeError) as exc:
        why = f"{exc.type}: {exc.text}" if isinstance(exc, DBusError) else type(exc).__name__
        raise DBusError(ACCESS_DENIED, f"polkit could not be asked about {ACTION} ({why}); refused") from None
    if authorised:
        return
    how = "needs authentication, and the daemon asks without interaction" if challenge else "is not allowed"
    raise DBusError(
        ACCESS_DENIED,
        f"{ACTION} {how} for uid {uid} (root and, by the packaged polkit rules, the scxctl group may)",
    )
