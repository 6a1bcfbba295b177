"""scx_loader's scxctl verbs against a live test daemon (tests/daemon_fakes.py): the same flags and
output lines as scx_loader's scxctl, our exit codes, one-line errors, and one desired state with
`enable`/`status`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_fakes import REPO, TUNABLE, DaemonEnv, daemon_env

from scxctl.commands.loader import display_mode, display_name, split_args
from scxctl.daemon.config import DaemonConfig, parse_config

EXTRA = """
[schedulers.scx_lavd]
command = [{py}, {standin}, "lavd"]
ops = "lavd"
[schedulers.scx_lavd.modes]
auto = ["ok"]
gaming = ["ok", "0", "gaming"]
""" + TUNABLE


def scx(env: DaemonEnv, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scxctl", *args], env=env.env, cwd=REPO,
                          capture_output=True, text=True, timeout=90)


def ok(env: DaemonEnv, *args: str) -> str:
    done = scx(env, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def refused(env: DaemonEnv, code: int, *args: str) -> str:
    """The one stderr line of a refusal with exit `code` (a hint line may follow); never a traceback."""
    done = scx(env, *args)
    assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = done.stderr.splitlines()
    assert 1 <= len(lines) <= 2 and lines[0].startswith("scxctl: error: "), done.stderr
    assert all(x.startswith("scxctl: hint: ") for x in lines[1:]), done.stderr
    return lines[0].removeprefix("scxctl: error: ")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonEnv]:
    with daemon_env(tmp_path_factory.mktemp("loader-cli")) as env:
        env.config.write_text(env.config.read_text() + EXTRA.format(
            py=json.dumps(sys.executable), standin=json.dumps(str(env.standin))))
        env.start()
        yield env


@pytest.fixture
def d(world: DaemonEnv) -> DaemonEnv:
    """The module's daemon with nothing enabled and nothing foreign loaded."""
    assert world.request("disable")["ok"]
    if world.kernel.state() != "disabled":
        world.kernel.unload()
    return world


def test_get_start_get_stop_in_scx_loaders_words(d: DaemonEnv) -> None:
    assert ok(d, "get") == "no scx scheduler running\n"
    assert ok(d, "start", "-s", "lavd", "-m", "gaming") == "started Lavd in Gaming mode\n"
    st = d.status()
    assert (st["desired"]["scheduler"], st["desired"]["mode"]) == ("scx_lavd", "gaming")  # lavd -> scx_lavd
    assert st["kernel"]["ops"] == "lavd" and d.standin_starts()[-1]["argv"] == ["lavd", "ok", "0", "gaming"]
    assert ok(d, "get") == "running Lavd in Gaming mode\n"
    assert ok(d, "stop") == "stopped\n"
    assert d.kernel.state() == "disabled" and d.status()["desired"]["enabled"] is False
    assert ok(d, "get") == "no scx scheduler running\n"
    assert ok(d, "stop") == "stopped\n"  # as scx_loader: nothing to stop is no error


def test_start_takes_upstream_names_and_modes_and_defaults_to_the_configured_mode(d: DaemonEnv) -> None:
    assert ok(d, "start", "--sched", "scx_lavd", "--mode", "PowerSave") == "started Lavd in PowerSave mode\n"
    assert ok(d, "stop") == "stopped\n"
    assert ok(d, "start", "-s", "fake") == "started Fake in Auto mode\n"


def test_start_refuses_when_a_scheduler_is_enabled_and_switch_when_none_is(d: DaemonEnv) -> None:
    assert "use 'start'" in refused(d, 2, "switch", "-s", "fake")
    assert "use 'start'" in refused(d, 2, "switch", "-m", "gaming")
    ok(d, "start", "-s", "fake", "-m", "gaming")
    before = d.status()["supervisor"]["pid"]
    msg = refused(d, 2, "start", "-s", "scx_lavd")
    assert msg == "a scheduler is already enabled (fake, mode gaming): use 'switch' instead of 'start'"
    assert d.status()["supervisor"]["pid"] == before and d.kernel.ops() == "fake"


def test_switch_in_both_forms(d: DaemonEnv) -> None:
    ok(d, "start", "-s", "fake", "-m", "powersave")
    # scx_loader's -s keeps the current mode ...
    assert ok(d, "switch", "-s", "lavd") == "switched to Lavd in PowerSave mode\n"
    assert d.status()["desired"]["mode"] == "powersave" and d.kernel.ops() == "lavd"
    assert ok(d, "switch", "-m", "gaming").startswith("scx_lavd (gaming) running, pid ")  # ours, -m alike
    assert ok(d, "switch", "-s", "fake", "-m", "lowlatency") == "switched to Fake in LowLatency mode\n"
    # ... ours, a bare SCHEDULER, takes the configured default mode (auto)
    assert ok(d, "switch", "scx_lavd").startswith("scx_lavd (auto) running, pid ")
    assert ok(d, "get") == "running Lavd in Auto mode\n"


def test_arguments_go_through_the_allow_list_and_conflict_with_mode(d: DaemonEnv) -> None:
    out = ok(d, "start", "-s", "tunable", "-a=--slice-us=5,--verbose")  # README's `-a="-v,..."` form
    assert out == 'started Tunable with arguments "--slice-us=5 --verbose"\n'
    assert d.standin_starts()[-1]["argv"] == ["tunable", "ok", "0", "--slice-us=5", "--verbose"]
    st = d.status()
    assert st["desired"]["args"] == ["--slice-us=5", "--verbose"] and st["desired"]["mode"] == "auto"
    assert ok(d, "get") == 'running Tunable with arguments "--slice-us=5 --verbose"\n'
    assert ok(d, "restart") == "restarted\n"
    assert d.standin_starts()[-1]["argv"] == ["tunable", "ok", "0", "--slice-us=5", "--verbose"]
    assert d.standin_starts()[-1]["pid"] != d.standin_starts()[-2]["pid"]

    starts = len(d.standin_starts())
    msg = refused(d, 2, "switch", "-s", "tunable", "-a", "--verbose", "-a", "--bogus")
    assert msg.startswith("argument 2 '--bogus' is not allowed (rule: must fully match one of allowed_args")
    assert "takes no client arguments" in refused(d, 2, "switch", "-s", "fake", "-a", "--verbose")
    assert refused(d, 2, "switch", "-s", "fake", "-m", "gaming", "-a", "--verbose") == (
        "the argument '--args' cannot be used with '--mode'")
    assert refused(d, 2, "start", "-s", "fake", "-m", "gaming", "-a", "--verbose") == (
        "the argument '--args' cannot be used with '--mode'")
    assert refused(d, 2, "switch", "-a", "--verbose") == "the argument '--args' requires '--sched'"
    assert len(d.standin_starts()) == starts
    assert d.status()["desired"]["args"] == ["--slice-us=5", "--verbose"]

    assert ok(d, "switch", "-s", "tunable", "--args", "--slice-us=9") == (
        'switched to Tunable with arguments "--slice-us=9"\n')
    assert ok(d, "switch", "-s", "fake", "-m", "gaming") == "switched to Fake in Gaming mode\n"
    assert d.status()["desired"]["args"] == []


def test_restart_and_restore(d: DaemonEnv) -> None:
    assert refused(d, 2, "restart") == "nothing is enabled to restart"
    assert ok(d, "restore") == "restored default scheduler Fake in Auto mode\n"
    st = d.status()
    assert (st["desired"]["scheduler"], st["desired"]["mode"]) == ("fake", "auto")
    assert st["kernel"]["owner"] == "scxctl"
    pid = st["supervisor"]["pid"]
    ok(d, "switch", "-m", "gaming")
    assert ok(d, "restore") == "restored default scheduler Fake in Auto mode\n"
    assert d.status()["supervisor"]["pid"] not in (None, pid)


def test_a_foreign_scheduler(d: DaemonEnv) -> None:
    d.kernel.load_foreign("rusty_1.0.5")
    try:
        assert ok(d, "get") == "running rusty_1.0.5 (not managed by scxctl)\n"
        assert "another sched_ext scheduler is loaded (rusty_1.0.5)" in refused(d, 5, "start", "-s", "fake")
    finally:
        d.kernel.unload()


def test_modes_and_list(d: DaemonEnv) -> None:
    assert ok(d, "modes") == 'supported modes: ["auto", "gaming", "powersave", "lowlatency", "server"]\n'
    lines = ok(d, "list").splitlines()
    assert lines[0] == ('supported schedulers: ["pyland", "crashy", "ejecty", "fake", "hangy", "hotplug", '
                        '"mute", "lavd", "silent", "tunable", "versioned"]')
    assert "  fake (default): ops fake; " in "\n".join(lines)  # ours follows
    data = json.loads(ok(d, "list", "--json"))
    assert [s["name"] for s in data["schedulers"]][7] == "scx_lavd"


def test_unknown_scheduler_and_mode_are_usage_errors(d: DaemonEnv) -> None:
    assert refused(d, 2, "start", "-s", "nope").startswith("unknown scheduler 'nope' (configured: pyland, ")
    assert "Invalid value for '--mode'" in refused(d, 2, "start", "-s", "fake", "-m", "turbo")
    assert "Missing option '--sched'" in refused(d, 2, "start")
    assert d.status()["desired"]["enabled"] is False


def test_without_a_daemon_exit_6_and_no_default_exit_2(tmp_path: Path) -> None:
    with daemon_env(tmp_path) as env:
        for verb in ("get", "stop", "restart"):
            assert refused(env, 6, verb).startswith("no scxctl daemon answers on ")
        text = env.config.read_text().replace('default_scheduler = "fake"', 'default_scheduler = ""')
        env.config.write_text(text)
        env.start()
        assert refused(env, 2, "restore") == 'no default scheduler is configured (default_scheduler is "")'
        assert env.kernel.state() == "disabled"


def test_root_help_lists_ours_first_then_the_scx_loader_panel() -> None:
    done = subprocess.run([sys.executable, "-m", "scxctl", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    rows = [ln.strip(" │") for ln in done.stdout.splitlines()]
    panel = next(i for i, r in enumerate(rows) if "scx_loader compatible" in r)
    first = {r.split()[0]: i for i, r in enumerate(rows) if r.split()}
    for ours in ("enable", "switch", "disable", "status", "list", "trace"):
        assert first[ours] < panel
    for verb in ("get", "start", "stop", "restart", "restore", "modes"):
        assert first[verb] > panel


def test_names_modes_and_args_as_scx_loader_spells_them() -> None:
    assert [display_name(n) for n in ("scx_lavd", "lavd", "scx_p2dq", "pyland", "scx_custom", "tunable")] == [
        "Lavd", "Lavd", "P2DQ", "Pyland", "Custom", "Tunable"]
    assert [display_mode(m) for m in ("auto", "gaming", "powersave", "lowlatency", "server")] == [
        "Auto", "Gaming", "PowerSave", "LowLatency", "Server"]
    assert split_args(["=-v,--performance", "-s,20000"]) == ["-v", "--performance", "-s", "20000"]
    assert split_args(None) is None
    config = parse_config({"schedulers": {"scx_lavd": {"command": "/usr/bin/scx_lavd"},
                                          "bpfland": {"command": "/usr/bin/scx_bpfland"}}})
    assert [config.resolve(n) for n in ("lavd", "scx_lavd", "bpfland", "scx_bpfland", "pyland", "scx_pyland",
                                        "nope")] == ["scx_lavd", "scx_lavd", "bpfland", "bpfland", "pyland",
                                                     "pyland", "nope"]
    assert DaemonConfig().resolve("scx_pyland") == "pyland"
