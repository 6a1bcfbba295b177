"""The daemon's TOML configuration: defaults, supervision limits, the external-scheduler allow-list.

Nothing a client sends can name a program: the daemon only runs pyland and the scx_* binaries
listed here, with the argument lists written here (the scx_loader flag-injection lesson), plus only
the client arguments that `allowed_args` admits (arglist.py).
Unknown keys are errors, so a typo is reported instead of silently ignored.
"""

from __future__ import annotations

import re
import signal
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scxctl import paths
from scxctl.daemon.arglist import compiled
from scxctl.daemon.modes import BUILTIN_POLICIES, Mode
from scxctl.fsutil import read_if_exists

PYLAND = "pyland"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class ConfigError(Exception):
    """The config file exists but cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class SupervisorLimits:
    # kernel must report our scheduler enabled within this; pyland's load (the verifier) takes about
    # a second on hardware, but 13.5 s in an emulated (TCG) guest at install and over 20 s there
    # right after a reboot
    verify_timeout_s: float = 45.0
    stop_timeout_s: float = 5.0  # SIGTERM (or stop_signal), then SIGKILL after this
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    max_failures: int = 5  # give up after this many failures ...
    failure_window_s: float = 300.0  # ... within this window
    monitor_interval_s: float = 1.0  # how often the kernel is re-read while the child runs


@dataclass(frozen=True)
class MetricsConfig:
    """The Prometheus text file the daemon keeps for node-exporter's textfile collector."""

    file: Path | None = field(default_factory=paths.metrics_file)  # None: no metrics
    interval_s: float = 15.0


@dataclass(frozen=True)
class ExternalScheduler:
    """An allow-listed scx_* binary: exact path, expected root/ops name, per-mode arguments."""

    name: str
    command: tuple[str, ...]  # absolute program path plus fixed leading arguments
    ops: str
    modes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    stop_signal: int = signal.SIGTERM
    # per mode: patterns a client argument must fully match (arglist.check_args); none: no arguments
    allowed_args: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def argv(self, mode: Mode) -> list[str]:
        return [*self.command, *self.modes.get(mode.value, self.modes.get(Mode.auto.value, ()))]


@dataclass(frozen=True)
class DbusConfig:
    """scx_loader's D-Bus interface (org.scx.Loader on the system bus), served beside the socket."""

    enabled: bool = True


# power-profiles-daemon's ActiveProfile -> the mode to follow it with (follow_power_profile)
DEFAULT_POWER_PROFILE_MODES: dict[str, Mode] = {
    "power-saver": Mode.powersave,
    "balanced": Mode.auto,
    "performance": Mode.gaming,
}


@dataclass(frozen=True)
class DaemonConfig:
    default_scheduler: str = PYLAND  # "": none (enable must name one; D-Bus RestoreDefault fails)
    default_mode: Mode = Mode.auto
    restore_on_boot: bool = True
    group: str = "scxctl"  # members may change state; everybody may read status
    pyland_policies: tuple[str, ...] = BUILTIN_POLICIES  # names non-root clients may pass
    pyland_ops: str = PYLAND
    limits: SupervisorLimits = field(default_factory=SupervisorLimits)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    dbus: DbusConfig = field(default_factory=DbusConfig)
    schedulers: dict[str, ExternalScheduler] = field(default_factory=dict)
    follow_power_profile: bool = False  # the mode follows power-profiles-daemon (service.py says when)
    power_profile_modes: dict[str, Mode] = field(default_factory=lambda: dict(DEFAULT_POWER_PROFILE_MODES))

    def scheduler_names(self) -> list[str]:
        return [PYLAND, *sorted(self.schedulers)]

    def resolve(self, name: str) -> str:
        """The configured scheduler a client means by `name`: the name itself, else with `scx_` added
        (scx_loader's scxctl users write `lavd`), else without it (its D-Bus clients send `scx_lavd`,
        and `scx_pyland` is pyland). Unknown names come back unchanged, for the caller to refuse."""
        names = self.scheduler_names()
        for candidate in (name, f"scx_{name}", name.removeprefix("scx_")):
            if candidate in names:
                return candidate
        return name


def _check_keys(table: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})"
        )


def _typed(table: dict[str, Any], key: str, types: type | tuple[type, ...], where: str, default: Any) -> Any:
    if key not in table:
        return default
    value = table[key]
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise ConfigError(f"{where}.{key}: expected {types}, got a boolean")
    if not isinstance(value, types):
        raise ConfigError(f"{where}.{key}: expected {getattr(types, '__name__', types)}, got {value!r}")
    return value


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return tuple(value)


def _limits(table: dict[str, Any]) -> SupervisorLimits:
    defaults = SupervisorLimits()
    names = set(SupervisorLimits.__dataclass_fields__)
    _check_keys(table, names, "[supervisor]")
    values: dict[str, Any] = {}
    for name in names:
        default = getattr(defaults, name)
        kind = (int,) if isinstance(default, int) else (int, float)
        value = _typed(table, name, kind, "[supervisor]", default)
        if value <= 0:
            raise ConfigError(f"[supervisor].{name}: must be > 0, got {value}")
        values[name] = value
    return SupervisorLimits(**values)


def _metrics(table: dict[str, Any]) -> MetricsConfig:
    _check_keys(table, {"file", "interval_s"}, "[metrics]")
    default = MetricsConfig()
    interval = _typed(table, "interval_s", (int, float), "[metrics]", default.interval_s)
    if not interval > 0:
        raise ConfigError(f"[metrics].interval_s: must be > 0, got {interval}")
    if "file" not in table:
        return MetricsConfig(default.file, float(interval))
    name = _typed(table, "file", str, "[metrics]", "")
    if not name:
        return MetricsConfig(None, float(interval))  # "" turns the metrics off
    path = Path(name)
    if not path.is_absolute() or name.endswith("/") or path.name in ("", ".", ".."):
        raise ConfigError(f"[metrics].file: expected an absolute file path or \"\" (off), got {name!r}")
    return MetricsConfig(path, float(interval))


def _dbus(table: dict[str, Any]) -> DbusConfig:
    _check_keys(table, {"enabled"}, "[dbus]")
    return DbusConfig(_typed(table, "enabled", bool, "[dbus]", True))


def _power_profile_modes(table: dict[str, Any]) -> dict[str, Mode]:
    """A table given replaces the default one: a profile it leaves out is not followed."""
    modes: dict[str, Mode] = {}
    for profile, name in table.items():
        if not isinstance(name, str) or name not in {m.value for m in Mode}:
            raise ConfigError(f"[power_profile_modes].{profile}: expected one of "
                              f"{', '.join(m.value for m in Mode)}, got {name!r}")
        modes[profile] = Mode(name)
    return modes


def _patterns(value: Any, where: str) -> tuple[str, ...]:
    patterns = _str_list(value, where)
    for pattern in patterns:
        try:
            compiled(pattern)
        except re.error as exc:
            raise ConfigError(f"{where}: {pattern!r} is not a valid regular expression: {exc}") from None
    return patterns


def _allowed_args(value: Any, where: str) -> dict[str, tuple[str, ...]]:
    """A list applies to every mode; a table gives each mode its own (a mode left out allows none)."""
    if isinstance(value, list):
        patterns = _patterns(value, where)
        return {m.value: patterns for m in Mode}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a list of patterns or a table of mode = [patterns]")
    _check_keys(value, {m.value for m in Mode}, where)
    return {m: _patterns(v, f"{where}.{m}") for m, v in value.items()}


def _signal(value: Any, where: str) -> int:
    if isinstance(value, str) and value in signal.Signals.__members__:
        return int(signal.Signals[value])
    raise ConfigError(f"{where}: expected a signal name such as SIGTERM or SIGINT, got {value!r}")


def _external(name: str, table: Any) -> ExternalScheduler:
    where = f"[schedulers.{name}]"
    if not _NAME_RE.match(name) or name == PYLAND:
        raise ConfigError(f"{where}: invalid scheduler name")
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table")
    _check_keys(table, {"command", "ops", "modes", "stop_signal", "allowed_args"}, where)
    if "command" not in table:
        raise ConfigError(f"{where}: `command` is required (absolute path of the binary)")
    raw = table["command"]
    command = (raw,) if isinstance(raw, str) else _str_list(raw, f"{where}.command")
    if not command or not Path(command[0]).is_absolute():
        raise ConfigError(f"{where}.command: the program must be an absolute path, got {command[:1]}")
    ops = _typed(table, "ops", str, where, name.removeprefix("scx_"))
    modes_raw = _typed(table, "modes", dict, where, {})
    _check_keys(modes_raw, {m.value for m in Mode}, f"{where}.modes")
    modes = {m: _str_list(v, f"{where}.modes.{m}") for m, v in modes_raw.items()}
    stop = _signal(table["stop_signal"], f"{where}.stop_signal") if "stop_signal" in table else signal.SIGTERM
    allowed = _allowed_args(table["allowed_args"], f"{where}.allowed_args") if "allowed_args" in table else {}
    return ExternalScheduler(name, command, ops, modes, stop, allowed)


def parse_config(data: dict[str, Any]) -> DaemonConfig:
    """Validate a parsed TOML document; ConfigError on anything unexpected."""
    _check_keys(
        data,
        {
            "default_scheduler",
            "default_mode",
            "restore_on_boot",
            "group",
            "supervisor",
            "pyland",
            "schedulers",
            "metrics",
            "dbus",
            "follow_power_profile",
            "power_profile_modes",
        },
        "config",
    )
    schedulers = {n: _external(n, t) for n, t in _typed(data, "schedulers", dict, "config", {}).items()}
    pyland = _typed(data, "pyland", dict, "config", {})
    _check_keys(pyland, {"policies", "ops"}, "[pyland]")
    policies = _str_list(pyland.get("policies", list(BUILTIN_POLICIES)), "[pyland].policies")
    default_scheduler = _typed(data, "default_scheduler", str, "config", PYLAND)
    if default_scheduler not in ("", PYLAND) and default_scheduler not in schedulers:
        raise ConfigError(
            f"default_scheduler {default_scheduler!r} is neither pyland nor in [schedulers] (\"\": none)"
        )
    mode_name = _typed(data, "default_mode", str, "config", Mode.auto.value)
    try:
        mode = Mode(mode_name)
    except ValueError:
        raise ConfigError(
            f"default_mode {mode_name!r} is not one of {', '.join(m.value for m in Mode)}"
        ) from None
    return DaemonConfig(
        default_scheduler=default_scheduler,
        default_mode=mode,
        restore_on_boot=_typed(data, "restore_on_boot", bool, "config", True),
        group=_typed(data, "group", str, "config", "scxctl"),
        pyland_policies=policies,
        pyland_ops=_typed(pyland, "ops", str, "[pyland]", PYLAND),
        limits=_limits(_typed(data, "supervisor", dict, "config", {})),
        metrics=_metrics(_typed(data, "metrics", dict, "config", {})),
        dbus=_dbus(_typed(data, "dbus", dict, "config", {})),
        schedulers=schedulers,
        follow_power_profile=_typed(data, "follow_power_profile", bool, "config", False),
        power_profile_modes=(_power_profile_modes(_typed(data, "power_profile_modes", dict, "config", {}))
                             if "power_profile_modes" in data else dict(DEFAULT_POWER_PROFILE_MODES)),
    )


def load_config(path: Path) -> DaemonConfig:
    """The config at `path`, or the defaults when it does not exist; ConfigError when it is unusable."""
    try:
        raw = read_if_exists(path)
    except OSError as exc:
        raise ConfigError(exc.strerror) from exc
    if raw is None:
        return DaemonConfig()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    try:
        return parse_config(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
