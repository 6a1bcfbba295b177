"""Every file location scxctl uses, in one place.

System-wide locations (daemon, config) follow the FHS; per-user ones (bench results) follow
platformdirs. Each can be overridden by an environment variable so tests and unprivileged users
never touch the real system paths.
"""

from __future__ import annotations

import os
from pathlib import Path

APP = "scxctl"

# variable -> default; the variable wins when set and non-empty
_SYSTEM = {
    "SCXCTL_CONFIG_DIR": "/etc/scxctl",
    "SCXCTL_STATE_DIR": "/var/lib/scxctl",
    "SCXCTL_LOG_DIR": "/var/log/scxctl",
    "SCXCTL_RUNTIME_DIR": "/run/scxctl",
}


def _env_path(var: str, default: str | Path) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else Path(default)


def config_dir() -> Path:
    return _env_path("SCXCTL_CONFIG_DIR", _SYSTEM["SCXCTL_CONFIG_DIR"])


def config_file() -> Path:
    return _env_path("SCXCTL_CONFIG", config_dir() / "config.toml")


def state_dir() -> Path:
    return _env_path("SCXCTL_STATE_DIR", _SYSTEM["SCXCTL_STATE_DIR"])


def state_file() -> Path:
    return state_dir() / "state.json"


def log_dir() -> Path:
    return _env_path("SCXCTL_LOG_DIR", _SYSTEM["SCXCTL_LOG_DIR"])


def daemon_log_file() -> Path:
    return log_dir() / "daemon.log"


def runtime_dir() -> Path:
    return _env_path("SCXCTL_RUNTIME_DIR", _SYSTEM["SCXCTL_RUNTIME_DIR"])


def control_socket() -> Path:
    return _env_path("SCXCTL_SOCKET", runtime_dir() / "control.sock")


PYLAND_STATS_NAME = "pyland-stats.json"


def pyland_stats_file() -> Path:
    """pyland's counters, written by the running loop for `scxctl stats` and the daemon's metrics."""
    return runtime_dir() / PYLAND_STATS_NAME


METRICS_FILE_DEFAULT = "/var/lib/prometheus/node-exporter/scxctl.prom"


def metrics_file() -> Path:
    """Where the daemon writes its Prometheus text when the config does not say (node-exporter's
    textfile collector directory); $SCXCTL_METRICS_FILE overrides, so test daemons stay out of it."""
    return _env_path("SCXCTL_METRICS_FILE", METRICS_FILE_DEFAULT)


def user_data_dir() -> Path:
    """Per-user data (bench results); honours XDG_DATA_HOME through platformdirs."""
    import platformdirs  # here, not at the top: `scxctl status` needs paths but not this (~10 ms)

    return _env_path("SCXCTL_DATA_DIR", platformdirs.user_data_path(APP))


def bench_results_dir() -> Path:
    return user_data_dir() / "bench"


def source_root() -> Path | None:
    """The source checkout this package runs from, if it runs from one (not from an install)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "bpf").is_dir() and (root / "pyproject.toml").is_file() else None


DEV_CACHE = Path("/var/cache/scxctl-dev")


def dev_cache_dir(kind: str, checkout: Path) -> Path:
    """Cache of a development tool (`vm`: guest kernels and images; `deb`: the package chroot).

    $SCXCTL_VM_CACHE / $SCXCTL_DEB_CACHE override. As root, one machine-wide directory: every clone
    (CI's fresh one included) reuses what another downloaded and built, each entry keyed by its own
    recipe; otherwise `.cache/<kind>` in the checkout, since only root can build those caches anyway.
    """
    default = DEV_CACHE / kind if os.geteuid() == 0 else checkout / ".cache" / kind
    return _env_path(f"SCXCTL_{kind.upper()}_CACHE", default)


def vm_cache_dir(checkout: Path) -> Path:
    """Cache of the VM test harness (guest kernels, base images, runs)."""
    return dev_cache_dir("vm", checkout)


PYLAND_OBJECT_ENV = "SCXCTL_BPF_OBJECT"
PYLAND_OBJECT_INSTALLED = "/usr/lib/scxctl/pyland.bpf.o"


def _built_candidates(env_var: str, checkout_rel: str, installed: str) -> list[tuple[str, Path]]:
    """A built file's search order, each with its origin: $ENV_VAR, the checkout's build output,
    the installed file (the first that exists is used; see scxctl/bpf/object.py)."""
    out: list[tuple[str, Path]] = []
    env = os.environ.get(env_var)
    if env:
        out.append((f"${env_var}", Path(env)))
    root = source_root()
    if root is not None:
        out.append(("checkout", root / checkout_rel))
    out.append(("installed", Path(installed)))
    return out


def pyland_object_candidates() -> list[tuple[str, Path]]:
    """$SCXCTL_BPF_OBJECT, the checkout's bpf/build/pyland.bpf.o, the installed object."""
    return _built_candidates(PYLAND_OBJECT_ENV, "bpf/build/pyland.bpf.o", PYLAND_OBJECT_INSTALLED)


BENCH_WORKER_ENV = "SCXCTL_BENCH_WORKER"
BENCH_WORKER_INSTALLED = "/usr/lib/scxctl/scxctl-bench-worker"


def bench_worker_candidates() -> list[tuple[str, Path]]:
    """`scxctl bench`'s native worker, searched like the BPF object: $SCXCTL_BENCH_WORKER, the
    checkout's native/build/scxctl-bench-worker, the installed one."""
    return _built_candidates(BENCH_WORKER_ENV, "native/build/scxctl-bench-worker", BENCH_WORKER_INSTALLED)
