"""Check results and the registry the checks add themselves to.

A check is a function `(ctx) -> CheckResult`. Checks register with `@check(...)` in a fixed
order; new checks (the BPF object check, later ones) slot in by importing their module in
`scxctl.doctor.registry`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scxctl.sysfs import SysRoot

SCHEMA_VERSION = 1


class Status(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass
class CheckResult:
    id: str
    title: str
    status: Status
    finding: str  # one line: what was found
    hint: str | None = None  # one line: what to do, whenever status is not ok
    details: dict[str, Any] = field(default_factory=dict)  # machine-readable facts behind the finding

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status.value,
            "finding": self.finding,
            "hint": self.hint,
            "details": self.details,
        }


@dataclass
class DoctorContext:
    """Everything a check may look at; tests replace the parts that touch the machine."""

    sysroot: SysRoot = field(default_factory=SysRoot)
    # results of checks that ran before, by id: later checks may depend on earlier findings
    results: dict[str, CheckResult] = field(default_factory=dict)


CheckFn = Callable[[DoctorContext], CheckResult]


@dataclass(frozen=True)
class RegisteredCheck:
    id: str
    title: str
    fn: CheckFn


REGISTRY: list[RegisteredCheck] = []


def check(check_id: str, title: str) -> Callable[[CheckFn], CheckFn]:
    def deco(fn: CheckFn) -> CheckFn:
        if any(c.id == check_id for c in REGISTRY):
            raise ValueError(f"duplicate doctor check id {check_id}")
        REGISTRY.append(RegisteredCheck(check_id, title, fn))
        return fn

    return deco
