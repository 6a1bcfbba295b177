"""What a bcc program needs on this machine: the bcc module and the running kernel's headers.

Checked before bcc is asked to compile anything, so that `scxctl trace` and `scxctl doctor` name the
exact package to install in one line instead of bcc's multi-line compiler failure (or a traceback).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from scxctl.errors import ExitCode, ScxctlError

BCC_PACKAGE = "python3-bpfcc"


def headers_package(release: str) -> str:
    return f"linux-headers-{release}"


# Debian's metapackages that keep the headers following the default kernels (packaging Suggests them)
HEADERS_META = ("linux-headers-amd64", "linux-headers-cloud-amd64")


def install_line(release: str) -> str:
    return f"apt install {BCC_PACKAGE} {headers_package(release)}"


@dataclass(frozen=True)
class Missing:
    what: str  # "bcc" or "headers"
    message: str  # one line, ends with the apt install line


def kernel_release() -> str:
    return os.uname().release


def bcc_importable() -> bool:
    """Without importing it: bcc's import loads libbcc (tens of ms) and is only needed to compile."""
    try:
        return importlib.util.find_spec("bcc") is not None
    except (ImportError, ValueError):
        return False


def headers_dir(release: str, modules_root: Path = Path("/lib/modules")) -> Path | None:
    """Where bcc finds the kernel headers (its own search order), or None when there are none.

    bcc reads BCC_KERNEL_SOURCE, else /lib/modules/RELEASE/build (with `source` for split Debian
    headers); a link whose target is missing does not count.
    """
    env = os.environ.get("BCC_KERNEL_SOURCE")
    candidates = [Path(env)] if env else [modules_root / release / "build"]
    for d in candidates:
        if (d / "include").is_dir() or (d / "Makefile").is_file():
            return d
    return None


def missing(release: str | None = None, modules_root: Path = Path("/lib/modules")) -> Missing | None:
    """The first thing bcc lacks here (bcc itself first), or None when a compile can be tried."""
    rel = release or kernel_release()
    if not bcc_importable():
        return Missing("bcc", f"the bcc Python module is not installed: {install_line(rel)}")
    if headers_dir(rel, modules_root) is None:
        return Missing("headers", f"no kernel headers for {rel} (/lib/modules/{rel}/build): "
                       f"apt install {headers_package(rel)}")
    return None


def require(release: str | None = None, modules_root: Path = Path("/lib/modules")) -> None:
    """Raise the one-line, exit 7 error when bcc cannot compile a program on this machine."""
    gap = missing(release, modules_root)
    if gap is not None:
        raise ScxctlError(gap.message, ExitCode.BPF)
