"""The control socket: line-delimited JSON requests, authorised by the peer's kernel credentials.

SO_PEERCRED gives the uid/gid the kernel recorded for the connecting process, so nothing the client
says about itself matters. Everyone may read (ping, status, list); root and members of the
configured group may change state (no polkit prompt, scriptable: the scx_loader lesson).
Every connection is bounded (line length, idle time, number of clients), and no request, however
malformed, can take the daemon down.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import os
import pwd
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scxctl.daemon import protocol
from scxctl.daemon.protocol import Request
from scxctl.errors import ExitCode, PermissionDenied, ScxctlError
from scxctl.log import get_logger

log = get_logger("scxctl.daemon")

MAX_PER_UID = 16  # concurrent connections per non-root uid; root is never turned away
IDLE_TIMEOUT_S = 10.0  # a connection that sends no complete line for this long is closed
WRITE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int


def peer_credentials(sock: Any) -> Peer:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(pid, uid, gid)


def may_change_state(peer: Peer, group: str) -> bool:
    """Root, or a member of `group` (primary or supplementary, as the user database says)."""
    if peer.uid == 0:
        return True
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        return False
    if peer.gid == gid:
        return True
    try:
        name = pwd.getpwuid(peer.uid).pw_name
    except KeyError:
        return False
    return gid in os.getgrouplist(name, peer.gid)


Handler = Callable[[Request, Peer], Awaitable[Any]]


class ControlServer:
    def __init__(
        self,
        path: Path,
        handler: Handler,
        group: Callable[[], str],
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_per_uid: int = MAX_PER_UID,
    ) -> None:
        self.path = path
        self._handler = handler
        self._group = group
        self._idle_timeout_s = idle_timeout_s
        self._max_per_uid = max_per_uid
        self._active: dict[int, int] = {}
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._claim_path()
        self._server = await asyncio.start_unix_server(
            self._client, path=str(self.path), limit=protocol.MAX_LINE
        )
        os.chmod(self.path, 0o666)  # everyone may connect; authorisation is per request

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _claim_path(self) -> None:
        """Refuse to start next to a live daemon; remove a stale socket left by a dead one."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        if not self.path.exists() and not self.path.is_symlink():
            return
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(self.path))
        except OSError:
            self.path.unlink()
            log.info("stale_socket_removed", path=str(self.path))
            return
        finally:
            probe.close()
        raise ScxctlError(f"another scxctl daemon already answers on {self.path}", ExitCode.BUSY)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            peer = peer_credentials(writer.get_extra_info("socket"))
        except OSError as exc:
            log.warning("connection_error", error=f"no peer credentials: {exc}")
            await self._close(writer)
            return
        if peer.uid != 0 and self._active.get(peer.uid, 0) >= self._max_per_uid:
            err = ScxctlError(f"too many connections from uid {peer.uid}; retry later")
            await self._send(writer, protocol.error_reply(None, err))
            await self._close(writer)
            return
        self._active[peer.uid] = self._active.get(peer.uid, 0) + 1
        try:
            await self._serve(reader, writer, peer)
        except Exception as exc:  # a connection problem must never reach the event loop
            log.warning("connection_error", uid=peer.uid, error=f"{type(exc).__name__}: {exc}")
        finally:
            self._active[peer.uid] -= 1
            await self._close(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Peer) -> None:
        while True:
            try:
                line = await asyncio.wait_for(reader.readline(), self._idle_timeout_s)
            except TimeoutError:
                return
            except (ValueError, asyncio.LimitOverrunError):
                err = ScxctlError(f"request longer than {protocol.MAX_LINE} bytes", ExitCode.USAGE)
                await self._send(writer, protocol.error_reply(None, err))
                return
            if not line:
                return
            if not line.strip():
                continue
            if not await self._send(writer, await self.dispatch(line, peer)):
                return

    async def dispatch(self, line: bytes, peer: Peer) -> bytes:
        req_id = None
        try:
            req = protocol.parse_request(line)
            req_id = req.id
            if req.op in protocol.MUTATING_OPS and not may_change_state(peer, self._group()):
                log.warning("request_denied", op=req.op, uid=peer.uid, pid=peer.pid)
                raise PermissionDenied(
                    f"{req.op} needs root or membership of the {self._group()!r} group "
                    f"(you are uid {peer.uid})",
                    hint=f"ask an admin: usermod -aG {self._group()} $USER (then log in again)",
                )
            return protocol.ok_reply(req_id, await self._handler(req, peer))
        except protocol.ProtocolError as exc:
            return protocol.error_reply(exc.req_id, exc)
        except ScxctlError as exc:
            return protocol.error_reply(req_id, exc)
        except Exception as exc:
            log.exception("request_failed", error=f"{type(exc).__name__}: {exc}")
            return protocol.error_reply(req_id, ScxctlError(f"internal daemon error: {type(exc).__name__}"))

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, data: bytes) -> bool:
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        except (TimeoutError, OSError):
            return False
        return True

    @staticmethod
    async def _close(writer: asyncio.StreamWriter) -> None:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1.0)
