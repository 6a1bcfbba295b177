"""What the VM test modules share: the guest scenario prelude and reading what it wrote under /results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Shell functions the guest scenario scripts share: state/ops of sched_ext, waiting for a state
# (enabled means pyland is the loaded ops), results under $R.
SCENARIO_PRELUDE = r"""#!/bin/bash
set -u
R=/results
SX=/sys/kernel/sched_ext
cd /opt/scxctl
state() { cat $SX/state 2>/dev/null; }
ops() { cat $SX/root/ops 2>/dev/null || echo none; }
wait_state() {  # wait_state WANT SECONDS
    for _ in $(seq 1 $(( $2 * 10 ))); do
        [ "$(state)" = "$1" ] && [ "$1" != enabled -o "$(ops)" = pyland ] && return 0
        sleep 0.1
    done
    return 1
}
"""


def read(results: Path, name: str) -> str:
    """The text of /results/NAME; a missing file fails the test with the name."""
    path = results / name
    assert path.exists(), f"the guest did not write {name}"
    return path.read_text()


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects among a log's lines (structlog JSON lines mixed with plain output)."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
