"""The persisted desired state: what the admin asked for, restored when the daemon starts.

Written atomically (temp file + fsync + rename), so a crash or power loss leaves the old or the new
state, never a torn file. A file that does not parse is moved aside and treated as "nothing
enabled": a safe state instead of a crash loop.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scxctl.fsutil import atomic_write_text, read_if_exists

STATE_VERSION = 1
MODE_SOURCES = ("auto", "explicit")


class StateError(Exception):
    """The state file exists but is unusable; the message says why."""


@dataclass
class DesiredState:
    enabled: bool = False
    scheduler: str | None = None
    mode: str | None = None
    policy: str | None = None
    updated_at: float = 0.0
    updated_by_uid: int | None = None
    # why the daemon last gave up on the scheduler (None while it has not): survives restarts
    gave_up: dict[str, Any] | None = None
    last_exit: dict[str, Any] | None = None
    args: list[str] = field(default_factory=list)  # client arguments in force (empty: by mode alone)
    # "explicit": a client chose the mode (or arguments), and it holds; "auto": the config's
    # default_mode or, with follow_power_profile, the power profile's mode chose it
    mode_source: str = "auto"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("extra")
        return {"version": STATE_VERSION, **data}


def _parse(data: Any) -> DesiredState:
    if not isinstance(data, dict):
        raise StateError("top level is not an object")
    if data.get("version") != STATE_VERSION:
        raise StateError(f"unsupported version {data.get('version')!r} (expected {STATE_VERSION})")
    state = DesiredState()
    checks: dict[str, tuple[type, ...]] = {
        "enabled": (bool,),
        "scheduler": (str, type(None)),
        "mode": (str, type(None)),
        "policy": (str, type(None)),
        "updated_at": (int, float),
        "updated_by_uid": (int, type(None)),
        "gave_up": (dict, type(None)),
        "last_exit": (dict, type(None)),
    }
    for key, types in checks.items():
        if key in data:
            if not isinstance(data[key], types):
                raise StateError(f"{key}: unexpected value {data[key]!r}")
            setattr(state, key, data[key])
    # a state written before mode_source existed: its mode may have been chosen, so it holds
    state.mode_source = data.get("mode_source", "explicit")
    if state.mode_source not in MODE_SOURCES:
        raise StateError(f"mode_source: unexpected value {state.mode_source!r}")
    if "args" in data:
        if not isinstance(data["args"], list) or not all(isinstance(a, str) for a in data["args"]):
            raise StateError(f"args: unexpected value {data['args']!r}")
        state.args = list(data["args"])
    if state.enabled and not state.scheduler:
        raise StateError("enabled without a scheduler")
    return state


def load_state(path: Path) -> DesiredState:
    """The saved state; a fresh (disabled) one when there is none; StateError when unusable."""
    try:
        raw = read_if_exists(path)
    except OSError as exc:
        raise StateError(exc.strerror) from exc
    if raw is None:
        return DesiredState()
    try:
        return _parse(json.loads(raw.decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError, StateError) as exc:
        raise StateError(f"{path}: {exc}") from exc


def save_state(path: Path, state: DesiredState) -> None:
    state.updated_at = state.updated_at or time.time()
    atomic_write_text(path, json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n", mode=0o644)


def quarantine(path: Path) -> Path | None:
    """Move an unusable state file aside (kept for the admin to inspect); its new name, or None."""
    target = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
    try:
        os.replace(path, target)
    except OSError:
        return None
    return target
