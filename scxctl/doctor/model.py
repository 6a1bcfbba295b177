"""Check results and the registry the checks add themselves to.

A check is a function `(ctx) -> CheckResult`. Checks register with `@check(...)` in a fixed
order; new checks (the BPF object check, later ones) slot in by importing their module in
`scxctl.doctor.registry`.
"""

from __future__ import annotations

import ctypes
import enum
import errno
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scxctl.bpf.syscall import probe_map_create
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


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    output: str  # stdout and stderr together


def run_command(argv: list[str], timeout: float = 10.0) -> CommandOutput:
    """Run a tool for its version output; a tool that hangs or cannot start is reported, not raised."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        return CommandOutput(124, f"timed out after {timeout:g} s")
    except OSError as exc:
        return CommandOutput(126, str(exc))
    return CommandOutput(proc.returncode, proc.stdout + proc.stderr)


def trial_load_pyland(path: Path, sysroot: SysRoot) -> None:
    """Load the pyland object configured as `scxctl run` configures it, without attaching, then close
    it; raises BpfError with the message `scxctl run` would print. Imported late: the pyland package
    is heavy and only needed when doctor gets as far as a trial load."""
    from scxctl.pyland.scheduler import RunOptions, trial_load

    trial_load(path, RunOptions(sysroot=sysroot))


def _search_path() -> str:
    """PATH plus the sbin directories (bpftool lives in /usr/sbin, often not on a user's PATH)."""
    dirs = (os.environ.get("PATH") or os.defpath).split(os.pathsep)
    dirs += [d for d in ("/usr/local/sbin", "/usr/sbin", "/sbin") if d not in dirs]
    return os.pathsep.join(dirs)


@dataclass
class DoctorContext:
    """Everything a check may look at; tests replace the parts that touch the machine.

    Files come through `sysroot`; what is not a file (uid, syscalls, shared libraries, programs on
    PATH) comes through the callables below, whose defaults touch the real machine.
    """

    sysroot: SysRoot = field(default_factory=SysRoot)
    euid: Callable[[], int] = os.geteuid
    bpf_probe: Callable[[], None] = probe_map_create  # raises OSError (with errno) when bpf() fails
    load_library: Callable[[str], Any] = ctypes.CDLL  # raises OSError when the library is not found
    search_path: str = field(default_factory=_search_path)  # PATH-style list of program directories
    run: Callable[[list[str]], CommandOutput] = run_command
    # loads a BPF object as `scxctl run` would, without attaching; raises BpfError when the kernel refuses it
    bpf_load: Callable[[Path, SysRoot], None] = trial_load_pyland
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


def result(
    check_id: str, status: Status, finding: str, hint: str | None = None, **details: Any
) -> CheckResult:
    """A CheckResult for a registered check, its title taken from the registry."""
    title = next((c.title for c in REGISTRY if c.id == check_id), check_id)
    return CheckResult(check_id, title, status, finding, hint, details)


def describe_error(exc: BaseException) -> str:
    """A short, specific reason for a failed read ("Is a directory", "not valid UTF-8 ...")."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
    if isinstance(exc, OSError) and exc.strerror:
        name = errno.errorcode.get(exc.errno or 0, "")
        return f"{exc.strerror} ({name})" if name else exc.strerror
    return f"{type(exc).__name__}: {exc}"
