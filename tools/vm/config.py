"""Where the harness keeps its files and which Debian it fetches from."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from scxctl import fsutil, paths

MIRROR = "http://deb.debian.org/debian"
SUITE = "trixie"
KERNEL_SUITES = ("trixie-backports", "trixie")  # searched in this order of preference
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
KERNEL_FLAVOUR = "cloud-amd64"

CHECKOUT = Path(__file__).resolve().parents[2]  # the working tree whose code goes into the guest


def cache_dir() -> Path:
    """scxctl.paths.vm_cache_dir: machine-wide as root, else `.cache/vm/` in the checkout."""
    return paths.vm_cache_dir(CHECKOUT)


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """Serialise builds of one cache entry between processes (parallel test runs share the cache)."""
    with fsutil.locked(cache_dir() / f".{name}.lock"):
        yield
