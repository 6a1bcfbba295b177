"""The persisted desired state: round trip, rejection of bad files, and atomicity under SIGKILL."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scxctl.daemon.state import DesiredState, StateError, load_state, quarantine, save_state

WRITER = """
import sys
from pathlib import Path
from scxctl.daemon.state import DesiredState, save_state
path = Path(sys.argv[1])
n = 0
while True:
    n += 1
    # a large policy string makes each write span many blocks, so a torn write would show
    save_state(path, DesiredState(True, "pyland", "auto", "x" * 200_000 + str(n), float(n)))
"""


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    assert load_state(path) == DesiredState()
    state = DesiredState(True, "pyland", "gaming", "fifo", 12.5, 1000, gave_up={"reason": "r"},
                         args=["--slice-us=900"])
    save_state(path, state)
    assert load_state(path) == state
    assert json.loads(path.read_text())["version"] == 1


def test_a_state_from_before_args_reads_as_started_by_mode(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"version": 1, "enabled": true, "scheduler": "pyland", "mode": "auto"}')
    assert load_state(path).args == []


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"[]",
        b'{"version": 1, "enabled": "yes"}',
        b'{"version": 1, "enabled": true}',
        b'{"version": 2}',
        b'{"version": 1, "args": "--slice-us=1"}',
        b'{"version": 1, "args": [1]}',
    ],
)
def test_bad_files_raise_state_error_naming_the_file(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(raw)
    with pytest.raises(StateError, match=str(path)):
        load_state(path)
    moved = quarantine(path)
    assert moved is not None and moved.read_bytes() == raw and not path.exists()


def test_state_always_parses_when_the_writer_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    rng = random.Random(5)
    seen: list[int] = []
    for _ in range(20):
        save_state(path, DesiredState(True, "pyland", "auto", "start", 1.0))
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], env={**os.environ})
        deadline = time.monotonic() + 30
        while load_state(path).policy == "start" and time.monotonic() < deadline:
            time.sleep(0.01)  # wait until the writer is writing (interpreter start-up is slow here)
        time.sleep(rng.random() * 0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = load_state(path)  # never torn, never empty: the old or the new content
        assert state.enabled and state.policy is not None and state.policy.startswith("x" * 200_000)
        seen.append(int(state.policy[200_000:]))
    assert all(n >= 1 for n in seen) and max(seen) > 1  # killed mid-stream, after several writes
