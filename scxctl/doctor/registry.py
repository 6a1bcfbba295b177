"""The check modules, in the order their checks run and are shown.

Importing a module registers its checks (see model.check). The run order comes from this list,
not from import order, so a test that imports one check module first cannot reshuffle the table.
`checks_bpfobj` (the BPF object freshness check) is optional: it is used when the module exists.
"""

from __future__ import annotations

import importlib
import importlib.util

from scxctl.doctor.model import REGISTRY, RegisteredCheck

PACKAGE = "scxctl.doctor"
MODULES = (
    "checks_kernel",
    "checks_btf",
    "checks_privileges",
    "checks_libbpf",
    "checks_toolchain",
    "checks_cgroup",
    "checks_cgroup_bw",
    "checks_install",
    "checks_bpfobj",  # optional slot, see the module docstring
    "checks_benchworker",
    "checks_bcc",
    "checks_verdict",  # must stay last: it summarises the results before it
)
OPTIONAL = frozenset({"checks_bpfobj"})


def load() -> None:
    """Import every check module (idempotent: Python caches modules)."""
    for name in MODULES:
        full = f"{PACKAGE}.{name}"
        if name in OPTIONAL and importlib.util.find_spec(full) is None:
            continue
        importlib.import_module(full)


def ordered() -> list[RegisteredCheck]:
    """The registered checks in MODULES order, then definition order within a module."""
    load()
    rank = {f"{PACKAGE}.{name}": float(i) for i, name in enumerate(MODULES)}
    unknown = MODULES.index("checks_verdict") - 0.5  # a module not listed still runs before the verdict
    position = {id(c): i for i, c in enumerate(REGISTRY)}
    return sorted(REGISTRY, key=lambda c: (rank.get(c.fn.__module__, unknown), position[id(c)]))
