"""The one line that says what the machine schedules with: `scxctl status`'s headline and systemd's STATUS=.

Apart from request handling so that the wording a user reads is written in one place, from the
same facts the status reply carries.
"""

from __future__ import annotations

from typing import Any

from scxctl.daemon.supervisor import Phase
from scxctl.sysfs import SchedExtStatus


def summary(kernel: SchedExtStatus, sup: dict[str, Any], owner: str | None) -> str:
    """`sup` is the supervisor's snapshot; `owner` is "scxctl", "other" or None (nothing loaded)."""
    if not kernel.available:
        return "sched_ext is not available in this kernel"
    if owner == "scxctl":
        return (
            f"{sup['scheduler']} ({sup['mode']}) running, pid {sup['pid']}, "
            f"restarts {sup['restart_count']}, re-attaches {sup['reattach_count']}"
        )
    if owner == "other":
        return f"another scheduler ({kernel.ops or kernel.state}) is loaded, not managed by scxctl"
    phase = sup["phase"]
    if phase == Phase.FAILED.value and sup["gave_up"]:
        return f"{sup['scheduler']} gave up ({sup['gave_up']['reason']}); default scheduler active"
    if phase == Phase.BACKOFF.value:
        last = sup["last_exit"] or {}
        return (
            f"{sup['scheduler']} not running, restart in {sup['next_restart_in_s']}s after "
            f"{last.get('kind')}: {last.get('reason')}"
        )
    if phase == Phase.STARTING.value:
        return f"{sup['scheduler']} starting"
    return "default scheduler (no sched_ext scheduler loaded)"
