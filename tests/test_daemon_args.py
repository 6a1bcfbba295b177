"""Client arguments (enable/switch `args`, D-Bus *WithArgs): caps first, then the allow-list; pyland's
built-in list checked against the real `scxctl run pyland`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from scxctl.cli import app
from scxctl.daemon.arglist import MAX_ARG_CHARS, MAX_ARGS, ArgsRefused, check_args, pyland_patterns
from scxctl.daemon.config import parse_config
from scxctl.daemon.modes import Mode
from scxctl.daemon.server import Peer
from scxctl.daemon.service import Daemon
from scxctl.errors import ExitCode

PYLAND = pyland_patterns(("deadline", "fifo"))


@pytest.mark.parametrize(
    ("args", "rule"),
    [
        ("--verbose", "type"),
        ([b"--verbose"], "type"),
        (["--verbose"] * (MAX_ARGS + 1), f"at most {MAX_ARGS} arguments"),
        (["--slice-us=" + "1" * MAX_ARG_CHARS], f"at most {MAX_ARG_CHARS} characters an argument"),
        (["--slice-us=5\n--bpf-object=/tmp/x.o"], "no control characters"),
        (["--policy=/tmp/evil.py"], "must fully match one of allowed_args of pyland"),
        (["--policy=fifo.py"], "must fully match"),
        (["--slice-us", "5000"], "must fully match"),  # a bare value would pass as anything
        (["--bpf-object=/tmp/x.o"], "must fully match"),
        (["--slice-us=0"], "must fully match"),
        (["--slice-us=12345678"], "must fully match"),
    ],
)
def test_refusals_name_the_rule(args: Any, rule: str) -> None:
    with pytest.raises(ArgsRefused) as exc:
        check_args(args, PYLAND, "pyland in mode auto")
    assert rule in exc.value.rule and f"(rule: {exc.value.rule})" in exc.value.message
    assert exc.value.code == ExitCode.USAGE and "\n" not in exc.value.message


def test_the_caps_hold_before_any_pattern_runs() -> None:
    huge = ["x" * 10_000_000]
    with pytest.raises(ArgsRefused, match="characters an argument"):
        check_args(huge, ["x*"], "s")  # a pattern that would admit it
    with pytest.raises(ArgsRefused, match="arguments given"):
        check_args(["x"] * 1_000_000, ["x"], "s")
    with pytest.raises(ArgsRefused, match="takes no client arguments"):
        check_args(["x"], (), "s")
    assert check_args([], (), "s") == ()


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["--policy=fifo"], {"policy": "fifo"}),
        (["--no-builtin-idle", "--slice-us=9000", "--slice-min-us=900"],
         {"builtin_idle": False, "slice_us": 9000, "slice_min_us": 900}),
        (["--builtin-idle", "--slice-us=4000"], {"builtin_idle": True, "slice_us": 4000}),
    ],
)
def test_pylands_allowed_arguments_are_what_scxctl_run_pyland_parses(
    args: list[str], want: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import scxctl.pyland.scheduler as sched

    assert check_args(args, PYLAND, "pyland") == tuple(args)
    seen: dict[str, Any] = {}

    def fake_run(opts: Any) -> Any:
        seen["opts"] = opts
        raise SystemExit(0)

    monkeypatch.setattr(sched, "run_pyland", fake_run)
    # as the daemon runs it: the mode's options first, then the client's (the last value wins)
    result = CliRunner().invoke(app, ["run", "pyland", "--policy", "deadline", "--slice-us", "20000", *args])
    assert "opts" in seen, result.output
    assert {k: getattr(seen["opts"], k) for k in want} == want


def _daemon(tmp_path: Path, config: dict[str, Any] | None = None) -> Daemon:
    d = Daemon(tmp_path / "absent.toml", tmp_path / "state.json", tmp_path / "sock")
    d.config = parse_config(config or {})
    return d


def test_the_daemon_appends_checked_arguments_to_the_modes_and_records_them(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    spec = d._spec("pyland", Mode.gaming, None, Peer(1, 1000, 1000), ["--slice-us=900", "--policy=fifo"])
    tail = ("--slice-us", "5000", "--slice-min-us", "500", "--slice-us=900", "--policy=fifo")
    assert spec.argv[-6:] == tail
    assert (spec.args, spec.policy, spec.mode) == (("--slice-us=900", "--policy=fifo"), "fifo", "gaming")
    assert d._spec("pyland", Mode.gaming, None, Peer(1, 1000, 1000), []).args == ()


def test_an_external_schedulers_allow_list_may_differ_by_mode(tmp_path: Path) -> None:
    ext = {"command": "/usr/bin/scx_a", "modes": {"gaming": ["-m", "performance"]},
           "allowed_args": {"gaming": ["--slice-us=[0-9]{1,6}"]}}
    d = _daemon(tmp_path, {"schedulers": {"scx_a": ext}})
    peer = Peer(1, 1000, 1000)
    spec = d._spec("scx_a", Mode.gaming, None, peer, ["--slice-us=20"])
    assert spec.argv == ("/usr/bin/scx_a", "-m", "performance", "--slice-us=20")
    assert spec.args == ("--slice-us=20",)
    with pytest.raises(ArgsRefused, match="scx_a in mode auto takes no client arguments"):
        d._spec("scx_a", Mode.auto, None, peer, ["--slice-us=20"])
