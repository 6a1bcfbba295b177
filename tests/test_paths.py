"""scxctl.paths: FHS defaults, platformdirs for user data, and every environment override."""

from __future__ import annotations

from pathlib import Path

import pytest

from scxctl import paths

_VARS = ("SCXCTL_CONFIG_DIR", "SCXCTL_CONFIG", "SCXCTL_STATE_DIR", "SCXCTL_LOG_DIR", "SCXCTL_RUNTIME_DIR",
         "SCXCTL_SOCKET", "SCXCTL_DATA_DIR", "XDG_DATA_HOME")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in _VARS:
        monkeypatch.delenv(var, raising=False)


def test_system_defaults() -> None:
    assert paths.config_dir() == Path("/etc/scxctl")
    assert paths.config_file() == Path("/etc/scxctl/config.toml")
    assert paths.state_file() == Path("/var/lib/scxctl/state.json")
    assert paths.daemon_log_file() == Path("/var/log/scxctl/daemon.log")
    assert paths.control_socket() == Path("/run/scxctl/control.sock")


@pytest.mark.parametrize(
    ("var", "fn", "relative"),
    [
        ("SCXCTL_CONFIG_DIR", paths.config_file, "config.toml"),
        ("SCXCTL_STATE_DIR", paths.state_file, "state.json"),
        ("SCXCTL_LOG_DIR", paths.daemon_log_file, "daemon.log"),
        ("SCXCTL_RUNTIME_DIR", paths.control_socket, "control.sock"),
        ("SCXCTL_DATA_DIR", paths.bench_results_dir, "bench"),
    ],
)
def test_directory_overrides_move_the_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, var: str,
                                            fn, relative: str) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(var, str(tmp_path))
    assert fn() == tmp_path / relative


def test_file_overrides_win_over_directories(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SCXCTL_CONFIG_DIR", str(tmp_path / "etc"))
    monkeypatch.setenv("SCXCTL_CONFIG", str(tmp_path / "my.toml"))
    monkeypatch.setenv("SCXCTL_SOCKET", str(tmp_path / "s.sock"))
    assert paths.config_file() == tmp_path / "my.toml"
    assert paths.control_socket() == tmp_path / "s.sock"


def test_empty_variable_means_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCXCTL_STATE_DIR", "")
    assert paths.state_dir() == Path("/var/lib/scxctl")


def test_user_data_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert paths.bench_results_dir() == tmp_path / "xdg" / "scxctl" / "bench"


def test_source_root_is_this_checkout() -> None:
    root = paths.source_root()
    assert root == Path(__file__).resolve().parent.parent
    assert (root / "pyproject.toml").is_file()
