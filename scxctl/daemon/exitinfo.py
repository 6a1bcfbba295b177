"""Why a supervised scheduler stopped: exit kind, reason and message, from its status and output.

`scxctl run` prints its exit reason on its last stderr line (a JSON log line when run with
`--log-format json`, as the daemon does); external scx_* schedulers print a free-form line. Both
are parsed best-effort: whatever cannot be parsed is kept verbatim as the message.
"""

from __future__ import annotations

import json
import re
import signal
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from scxctl.errors import ExitCode

# kinds the daemon records (a superset of what the kernel's exit info says)
STOPPED = "stopped"  # we asked it to stop and it did
EJECTED = "ejected"  # the kernel unloaded it (stall, error, sysrq): exit status 8 or seen in sysfs
CRASHED = "crashed"  # non-zero exit status
KILLED = "killed"  # died from a signal we did not send
EXITED = "exited"  # exit status 0 although nobody asked it to stop
VERIFY_FAILED = "verify_failed"  # never became the kernel's scheduler within the timeout
SPAWN_FAILED = "spawn_failed"  # could not be executed at all

_KV_RE = re.compile(r"(\w+)=(\"[^\"]*\"|'[^']*'|\S+)")
# `scxctl run`'s last line: "...: ERROR_STALL (runnable task stall) - watchdog failed ..." (ExitInfo.describe)
_KIND_RE = re.compile(
    r"\b(NONE|DONE|UNREG(?:_BPF|_KERN)?|SYSRQ|ERROR(?:_BPF|_STALL)?)\b(?: \(([^)]*)\))?(?: - (.*))?"
)
_ERROR_PREFIX = "scxctl: error: "


@dataclass
class ExitInfo:
    kind: str
    reason: str
    message: str = ""
    returncode: int | None = None
    signal: str | None = None
    runtime_s: float = 0.0
    at: float = field(default_factory=time.time)
    kernel_exit_kind: str | None = None  # the kernel's SCX_EXIT_* name when the child reported it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _from_json_line(line: str) -> dict[str, str]:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return {}
    if not isinstance(data, dict):
        return {}
    found: dict[str, str] = {}
    for key in ("exit_kind", "kind"):
        if isinstance(data.get(key), (str, int)):
            found["kind"] = str(data[key])
            break
    if isinstance(data.get("reason"), str):
        found["reason"] = data["reason"]
    for key in ("message", "msg", "exit_msg", "event"):
        if isinstance(data.get(key), str) and data[key]:
            found["message"] = data[key]
            break
    return found


def _from_text_line(line: str) -> dict[str, str]:
    found: dict[str, str] = {}
    line = line.removeprefix(_ERROR_PREFIX)
    kind = _KIND_RE.search(line)
    if kind:
        found["kind"] = kind.group(1)
        if kind.group(2):
            found["reason"] = kind.group(2)
        found["message"] = kind.group(3) or line
        return found
    for key, value in _KV_RE.findall(line):
        value = value.strip("\"'")
        if key in ("exit_kind", "kind") and "kind" not in found:
            found["kind"] = value
        elif key == "reason":
            found["reason"] = value
        elif key in ("message", "msg") and value:
            found["message"] = value
    return found


def last_words(lines: list[str]) -> dict[str, str]:
    """kind/reason/message the child stated on its last non-empty output line (empty dict: none)."""
    for line in reversed(lines):
        line = line.strip()
        if not line:
            continue
        found = _from_json_line(line) if line.startswith("{") else _from_text_line(line)
        found.setdefault("message", line.removeprefix(_ERROR_PREFIX)[:500])
        return found
    return {}


def classify(
    returncode: int, *, requested_stop: bool, lines: list[str], runtime_s: float, kernel_ejected: bool = False
) -> ExitInfo:
    """An ExitInfo for a child that exited with `returncode` after `runtime_s` seconds."""
    words = last_words(lines)
    sig = None
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode).name
        except ValueError:
            sig = f"signal {-returncode}"
    if requested_stop and (returncode == 0 or sig in ("SIGTERM", "SIGINT", "SIGKILL")):
        kind, reason = STOPPED, "stop requested"
    elif returncode == int(ExitCode.EJECTED) or kernel_ejected:
        kind, reason = EJECTED, words.get("reason") or "the kernel unloaded the scheduler"
    elif sig is not None:
        kind, reason = KILLED, f"killed by {sig}"
    elif returncode != 0:
        kind, reason = CRASHED, words.get("reason") or f"exit status {returncode}"
    else:
        kind, reason = EXITED, words.get("reason") or "exited with status 0 without being asked to stop"
    return ExitInfo(
        kind,
        reason,
        words.get("message", ""),
        returncode,
        sig,
        round(runtime_s, 3),
        kernel_exit_kind=words.get("kind"),
    )
