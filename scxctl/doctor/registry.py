"""The check modules, imported in the order their checks run."""

from __future__ import annotations

_loaded = False


def load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    # Importing a module registers its checks (see model.check). Order is output order.
    from scxctl.doctor import checks_kernel  # noqa: F401
