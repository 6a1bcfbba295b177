"""Which installation of scxctl is running: the Debian package, a virtual environment or a checkout.

Each comes with its own `scxctl` executable, and the systemd unit must start that one: a unit that
names another install's executable runs other code than the one the admin just upgraded, or fails
with 203/EXEC when that executable is absent.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from scxctl import paths

PACKAGE_SITE = Path("/usr/lib/python3/dist-packages")
PACKAGE_EXECUTABLE = Path("/usr/bin/scxctl")
UNIT = "scxctl.service"
# systemd's search order for system units: an admin's copy in /etc wins over the package's
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")


@dataclass(frozen=True)
class Install:
    kind: str  # "package", "venv", "checkout" or "pip" (a system-wide pip install)
    code: Path  # the scxctl package directory that runs
    executable: Path | None  # the `scxctl` a unit should start for this install; None: none is known

    def describe(self) -> str:
        return f"{self.kind} ({self.code})"


def _in_venv() -> bool:
    return sys.prefix != sys.base_prefix


def current(code: Path | None = None) -> Install:
    """The install this process runs from (`code`: the scxctl package directory, for tests)."""
    code = code or Path(paths.__file__).resolve().parent
    venv_exe = Path(sys.prefix) / "bin" / "scxctl"
    if (code.parent / "pyproject.toml").is_file() and (code.parent / "bpf").is_dir():
        return Install("checkout", code, venv_exe if _in_venv() and venv_exe.exists() else None)
    if code.is_relative_to(PACKAGE_SITE):
        return Install("package", code, PACKAGE_EXECUTABLE)
    if _in_venv():
        return Install("venv", code, venv_exe)
    return Install("pip", code, Path("/usr/local/bin/scxctl"))


def exec_start(unit_text: str) -> Path | None:
    """The executable of the unit's ExecStart= as systemd resolves it, without its prefix characters.

    `unit_text` is the unit followed by its drop-ins in the order systemd reads them; an empty
    `ExecStart=` (how a drop-in replaces the command) clears what came before."""
    exe = None
    for line in unit_text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "ExecStart":
            exe = Path(value.split()[0].lstrip("@-:+!")) if value.strip() else None
    return exe
