"""Capability sets of this process, from the Cap* lines of /proc/self/status.

Loading a BPF scheduler needs CAP_BPF and CAP_SYS_ADMIN in the *effective* set; root inside a
restricted container may lack them, so the uid alone does not answer the question.
"""

from __future__ import annotations

from dataclasses import dataclass

from scxctl.sysfs import SysRoot

CAP_SYS_ADMIN = 21
CAP_PERFMON = 38
CAP_BPF = 39

CAP_NAMES = {CAP_SYS_ADMIN: "CAP_SYS_ADMIN", CAP_PERFMON: "CAP_PERFMON", CAP_BPF: "CAP_BPF"}

_FIELDS = {"CapInh": "inheritable", "CapPrm": "permitted", "CapEff": "effective",
           "CapBnd": "bounding", "CapAmb": "ambient"}


class CapsError(ValueError):
    """/proc/self/status has no usable Cap* lines."""


@dataclass(frozen=True)
class CapSets:
    inheritable: int
    permitted: int
    effective: int
    bounding: int
    ambient: int

    def has_effective(self, cap: int) -> bool:
        return bool(self.effective >> cap & 1)

    def missing_effective(self, *caps: int) -> list[int]:
        return [c for c in caps if not self.has_effective(c)]


def parse_status(text: str) -> CapSets:
    """Parse the Cap* lines (hexadecimal bit masks) of a /proc/PID/status text."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key in _FIELDS:
            try:
                values[_FIELDS[key]] = int(value.strip(), 16)
            except ValueError as exc:
                raise CapsError(f"{key} is not a hexadecimal mask: {value.strip()!r}") from exc
    missing = [k for k, v in _FIELDS.items() if v not in values]
    if missing:
        raise CapsError(f"no {', '.join(missing)} line")
    return CapSets(**values)


def read_caps(sysroot: SysRoot | None = None) -> CapSets:
    """This process's capability sets; raises OSError, UnicodeDecodeError or CapsError."""
    return parse_status((sysroot or SysRoot()).read_text("/proc/self/status"))
