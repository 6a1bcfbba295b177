"""The control-socket wire format: one JSON object per line, versioned.

Request:  {"v": 1, "id": ANY, "op": "status", "args": {...}}
Reply:    {"v": 1, "id": ANY, "ok": true, "result": {...}}
          {"v": 1, "id": ANY, "ok": false,
           "error": {"code": "BUSY", "exit": 5, "message": "...", "hint": ...}}

`code` is an ExitCode name, so the CLI exits with the documented status of the daemon's verdict.
A peer speaking another version gets an error reply, never a dropped connection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from scxctl.errors import ExitCode, ScxctlError

VERSION = 1
MAX_LINE = 64 * 1024  # a request longer than this is rejected (and the connection closed)
OPS = ("ping", "status", "list", "enable", "switch", "disable", "start", "restart", "restore")
MUTATING_OPS = frozenset({"enable", "switch", "disable", "start", "restart", "restore"})


class ProtocolError(ScxctlError):
    """A request the daemon cannot accept (malformed, wrong version, unknown op)."""

    def __init__(self, message: str, req_id: Any = None) -> None:
        super().__init__(message, ExitCode.USAGE)
        self.req_id = req_id  # echoed in the error reply when the request had a usable id


@dataclass
class Request:
    op: str
    args: dict[str, Any] = field(default_factory=dict)
    id: Any = None


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8") + b"\n"


def request_line(op: str, args: dict[str, Any] | None = None, req_id: Any = None) -> bytes:
    return encode({"v": VERSION, "id": req_id, "op": op, "args": args or {}})


def parse_request(line: bytes) -> Request:
    """Decode one request line; ProtocolError for anything that is not a valid v1 request."""
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ProtocolError(f"malformed request: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise ProtocolError("malformed request: expected a JSON object")
    req_id = data.get("id")
    if not isinstance(req_id, (str, int, type(None))) or isinstance(req_id, bool):
        req_id = None
    if data.get("v") != VERSION:
        raise ProtocolError(
            f"unsupported protocol version {data.get('v')!r} (this daemon speaks {VERSION})", req_id
        )
    op, args = data.get("op"), data.get("args", {})
    if op not in OPS:
        raise ProtocolError(f"unknown op {op!r} (ops: {', '.join(OPS)})", req_id)
    if not isinstance(args, dict):
        raise ProtocolError("malformed request: args must be an object", req_id)
    return Request(op, args, req_id)


def ok_reply(req_id: Any, result: Any) -> bytes:
    return encode({"v": VERSION, "id": req_id, "ok": True, "result": result})


def error_reply(req_id: Any, exc: ScxctlError) -> bytes:
    error = {"code": exc.code.name, "exit": int(exc.code), "message": exc.message, "hint": exc.hint}
    return encode({"v": VERSION, "id": req_id, "ok": False, "error": error})


def parse_reply(line: bytes) -> Any:
    """The result of a reply line; the daemon's error re-raised as ScxctlError with its exit code."""
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScxctlError(f"the daemon sent a malformed reply ({type(exc).__name__})") from None
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise ScxctlError(
            "the daemon speaks another protocol version; restart it after an upgrade",
            hint="systemctl restart scxctl.service",
        )
    if data.get("ok") is True:
        return data.get("result")
    error = data.get("error") if isinstance(data.get("error"), dict) else {}
    try:
        code = ExitCode[str(error.get("code"))]
    except KeyError:
        code = ExitCode.FAILURE
    hint = error.get("hint")
    raise ScxctlError(
        str(error.get("message") or "the daemon refused the request"),
        code,
        hint if isinstance(hint, str) else None,
    )
