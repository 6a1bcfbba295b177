"""Terminal output shared by the commands: one Rich console for results, one for diagnostics."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

from scxctl.errors import ScxctlError

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    """Machine output: plain JSON on stdout, never styled or wrapped by Rich."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def report_error(exc: ScxctlError) -> None:
    """The one-line error format every command uses (plus a hint line when there is one)."""
    sys.stderr.write(f"scxctl: error: {exc.message}\n")
    if exc.hint:
        sys.stderr.write(f"scxctl: hint: {exc.hint}\n")
    sys.stderr.flush()
