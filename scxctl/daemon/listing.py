"""What `scxctl list` shows: the schedulers and modes a config allows.

A module of its own, free of the daemon's machinery, because the CLI builds the same answer from
the config file when no daemon answers.
"""

from __future__ import annotations

import os
from typing import Any

from scxctl.daemon.config import PYLAND, DaemonConfig
from scxctl.daemon.modes import PYLAND_MODES, Mode


def listing(config: DaemonConfig) -> dict[str, Any]:
    """Schedulers and modes as configured (also used by the CLI when no daemon answers)."""
    schedulers = [
        {
            "name": PYLAND,
            "kind": "pyland",
            "ops": config.pyland_ops,
            "available": True,
            "policies": list(config.pyland_policies),
        }
    ]
    for name, ext in sorted(config.schedulers.items()):
        schedulers.append(
            {
                "name": name,
                "kind": "external",
                "ops": ext.ops,
                "command": list(ext.command),
                "available": os.access(ext.command[0], os.X_OK),
                "modes": {m: list(a) for m, a in ext.modes.items()},
            }
        )
    modes = [
        {"name": m.value, "pyland_options": PYLAND_MODES[m].argv(), "why": PYLAND_MODES[m].why} for m in Mode
    ]
    return {
        "default_scheduler": config.default_scheduler or None,
        "default_mode": config.default_mode.value,
        "schedulers": schedulers,
        "modes": modes,
    }
