"""Config validation and the mode -> pyland option mapping (checked against the real `scxctl run`)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from scxctl.cli import app
from scxctl.daemon.config import ConfigError, DaemonConfig, load_config, parse_config
from scxctl.daemon.modes import PYLAND_MODES, Mode, parse_mode

GOOD = """
default_scheduler = "scx_bpfland"
default_mode = "gaming"
restore_on_boot = false
group = "wheel"
[supervisor]
max_failures = 3
backoff_max_s = 10
[pyland]
policies = ["deadline"]
[schedulers.scx_bpfland]
command = ["/usr/bin/scx_bpfland"]
ops = "bpfland"
stop_signal = "SIGINT"
[schedulers.scx_bpfland.modes]
auto = []
gaming = ["-m", "performance"]
"""


def test_good_config(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    cfg = load_config(path)
    assert (cfg.default_scheduler, cfg.default_mode, cfg.restore_on_boot, cfg.group) == (
        "scx_bpfland",
        Mode.gaming,
        False,
        "wheel",
    )
    assert cfg.limits.max_failures == 3 and cfg.limits.backoff_max_s == 10 and cfg.limits.stop_timeout_s == 5
    ext = cfg.schedulers["scx_bpfland"]
    assert ext.argv(Mode.gaming) == ["/usr/bin/scx_bpfland", "-m", "performance"]
    assert ext.argv(Mode.server) == ["/usr/bin/scx_bpfland"]  # falls back to auto's arguments
    assert ext.stop_signal == signal.SIGINT and ext.ops == "bpfland"
    assert cfg.scheduler_names() == ["pyland", "scx_bpfland"]


def test_missing_file_gives_defaults(tmp_path: Path) -> None:
    assert load_config(tmp_path / "absent.toml") == DaemonConfig()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("x = 1", "unknown key(s) x"),
        ("[supervisor]\nmax_failures = 0", "must be > 0"),
        ("[supervisor]\nmax_failures = true", "got a boolean"),
        ("default_mode = 'turbo'", "'turbo' is not one of auto"),
        ("default_scheduler = 'scx_nope'", "neither pyland nor in [schedulers]"),
        ("[schedulers.scx_a]\ncommand = 'scx_a'", "must be an absolute path"),
        ("[schedulers.scx_a]\nops = 'a'", "`command` is required"),
        ("[schedulers.scx_a]\ncommand = '/bin/a'\nstop_signal = 'SIGFOO'", "expected a signal name"),
        (
            "[schedulers.scx_a]\ncommand = '/bin/a'\n[schedulers.scx_a.modes]\nturbo = []",
            "unknown key(s) turbo",
        ),
        ("[schedulers.pyland]\ncommand = '/bin/a'", "invalid scheduler name"),
        ("[schedulers.scx_a]\ncommand = '/bin/a'\nallowed_args = ['--x=(']", "not a valid regular expr"),
        ("[schedulers.scx_a]\ncommand = '/bin/a'\nallowed_args = '--x'", "expected a list of patterns or"),
        ("[schedulers.scx_a]\ncommand = '/bin/a'\nallowed_args = [1]", "allowed_args: expected a list"),
        (
            "[schedulers.scx_a]\ncommand = '/bin/a'\n[schedulers.scx_a.allowed_args]\nturbo = []",
            "allowed_args: unknown key(s) turbo",
        ),
        ("[dbus]\nenabled = 'yes'", "[dbus].enabled: expected"),
        ("[dbus]\nname = 'org.x'", "[dbus]: unknown key(s) name"),
        ("not toml at all [", "not valid TOML"),
    ],
)
def test_bad_configs_are_rejected_with_a_clear_message(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert needle in str(exc.value) and str(path) in str(exc.value)


def test_allowed_args_as_a_list_cover_every_mode_and_as_a_table_only_the_modes_named() -> None:
    table = {"command": "/bin/a", "allowed_args": ["--slice-us=[0-9]+"]}
    every = parse_config({"schedulers": {"scx_a": table}}).schedulers["scx_a"].allowed_args
    assert every == {m.value: ("--slice-us=[0-9]+",) for m in Mode}
    table = {"command": "/bin/a", "allowed_args": {"gaming": ["-k"]}}
    some = parse_config({"schedulers": {"scx_a": table}}).schedulers["scx_a"].allowed_args
    assert some == {"gaming": ("-k",)}
    none = parse_config({"schedulers": {"scx_a": {"command": "/bin/a"}}}).schedulers["scx_a"].allowed_args
    assert none == {}


def test_dbus_is_on_unless_turned_off_and_the_default_scheduler_may_be_none() -> None:
    assert DaemonConfig().dbus.enabled is True
    assert parse_config({"dbus": {"enabled": False}}).dbus.enabled is False
    assert parse_config({"default_scheduler": ""}).default_scheduler == ""


def test_parse_mode() -> None:
    assert parse_mode("lowlatency") is Mode.lowlatency
    with pytest.raises(ValueError, match="modes: auto, gaming, powersave, lowlatency, server"):
        parse_mode("turbo")


@pytest.mark.parametrize("mode", list(Mode))
def test_every_mode_is_accepted_by_scxctl_run(mode: Mode, monkeypatch: pytest.MonkeyPatch) -> None:
    """The options a mode produces must parse with the real `scxctl run pyland` command."""
    import scxctl.pyland.scheduler as sched

    seen: dict[str, Any] = {}

    def fake_run(opts: Any) -> Any:
        seen["opts"] = opts
        raise SystemExit(0)

    monkeypatch.setattr(sched, "run_pyland", fake_run)
    result = CliRunner().invoke(app, ["run", "pyland", *PYLAND_MODES[mode].argv()])
    assert "opts" in seen, result.output
    opts, want = seen["opts"], PYLAND_MODES[mode]
    assert opts.policy == want.policy and opts.builtin_idle == want.builtin_idle
    if want.slice_us is not None:
        assert opts.slice_us == want.slice_us and opts.slice_min_us == want.slice_min_us


def test_metrics_defaults_to_node_exporters_directory_every_15_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCXCTL_METRICS_FILE", raising=False)
    metrics = DaemonConfig().metrics
    assert metrics.file == Path("/var/lib/prometheus/node-exporter/scxctl.prom")
    assert metrics.interval_s == 15.0
    monkeypatch.setenv("SCXCTL_METRICS_FILE", "/tmp/x/m.prom")
    assert parse_config({}).metrics.file == Path("/tmp/x/m.prom")


def test_metrics_file_and_interval_are_read_and_empty_turns_them_off() -> None:
    m = parse_config({"metrics": {"file": "/srv/prom/scxctl.prom", "interval_s": 2}}).metrics
    assert (m.file, m.interval_s) == (Path("/srv/prom/scxctl.prom"), 2.0)
    assert parse_config({"metrics": {"file": ""}}).metrics.file is None


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ({"interval_s": 0}, "[metrics].interval_s: must be > 0"),
        ({"interval_s": "15"}, "[metrics].interval_s: expected"),
        ({"interval_s": True}, "got a boolean"),
        ({"file": "scxctl.prom"}, "[metrics].file: expected an absolute file path"),
        ({"file": "/var/lib/prometheus/"}, "[metrics].file: expected an absolute file path"),
        ({"file": 1}, "[metrics].file: expected str"),
        ({"path": "/x.prom"}, "[metrics]: unknown key(s) path"),
    ],
)
def test_bad_metrics_settings_are_rejected(table: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"metrics": table})
    assert needle in str(err.value)


def test_the_example_config_parses_with_the_default_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCXCTL_METRICS_FILE", raising=False)
    example = Path(__file__).resolve().parent.parent / "packaging/systemd/config.toml.example"
    assert load_config(example).metrics == DaemonConfig().metrics
