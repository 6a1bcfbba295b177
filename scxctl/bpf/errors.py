"""BpfError, and the errno of a failed libbpf call mapped to what the user should see.

Callers get `BpfError` (an `ScxctlError`) with a documented exit code, never a bare errno:

- object file missing, libbpf older than 1.4, verifier rejection (log tail attached) -> ExitCode.BPF
- EPERM (not root / no CAP_BPF + CAP_SYS_ADMIN) -> ExitCode.PERMISSION
- a struct_ops object on a kernel without sched_ext -> ExitCode.UNSUPPORTED
- EBUSY/EEXIST on struct_ops attach (another scheduler loaded) -> ExitCode.BUSY
"""

from __future__ import annotations

import ctypes
import errno
import os

from scxctl.bpf.libbpf_messages import last_warning
from scxctl.bpf.verifier_log import kfunc_missing_impl, log_tail, verifier_reason
from scxctl.errors import ExitCode, ScxctlError
from scxctl.sysfs import SysRoot, read_sched_ext


class BpfError(ScxctlError):
    """A BPF operation failed; `errno` is the libbpf/kernel errno (0 if none), `log` the verifier log."""

    def __init__(
        self,
        message: str,
        code: ExitCode = ExitCode.BPF,
        hint: str | None = None,
        err: int = 0,
        log: str = "",
    ) -> None:
        super().__init__(message, code, hint)
        self.errno = err
        self.log = log


def _strerror(err: int) -> str:
    return os.strerror(err) if err else "unknown error"


def errno_of(ret: int) -> int:
    """libbpf >= 1.0 returns -errno from int functions; errno is set too."""
    return -ret if ret < 0 else (ctypes.get_errno() or errno.EINVAL)


def error_for_errno(
    err: int, action: str, *, struct_ops: bool = False, log: str = "", sysroot: SysRoot | None = None
) -> BpfError:
    """Map a failed libbpf call's errno to the BpfError (and exit code) the user should see."""
    why = _strerror(err)
    if err == errno.EPERM and not log:
        return BpfError(
            f"{action}: permission denied ({why})",
            ExitCode.PERMISSION,
            "run as root (BPF needs CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN for struct_ops)",
            err,
        )
    if struct_ops and err in (errno.EBUSY, errno.EEXIST):
        status = read_sched_ext(sysroot)
        name = status.ops or "unknown"
        return BpfError(
            f"another sched_ext scheduler is loaded: {name}",
            ExitCode.BUSY,
            "stop it first (scxctl stop, or end the process that loaded it)",
            err,
        )
    if struct_ops and not read_sched_ext(sysroot).available:
        detail = last_warning() or why
        return BpfError(
            f"{action}: this kernel cannot run sched_ext schedulers ({detail})",
            ExitCode.UNSUPPORTED,
            "boot a kernel with CONFIG_SCHED_CLASS_EXT=y (see scxctl doctor)",
            err,
        )
    # libbpf fails with ESRCH (1.4) or ENOENT when a struct_ops type or member is not in kernel BTF
    if struct_ops and err in (errno.ENOENT, errno.ESRCH, errno.EOPNOTSUPP, errno.ENOTSUP):
        detail = last_warning()
        return BpfError(
            f"{action}: the kernel does not support this sched_ext scheduler ({why})"
            + (f": {detail}" if detail else ""),
            ExitCode.UNSUPPORTED,
            "the running kernel lacks a sched_ext feature the object needs (see scxctl doctor)",
            err,
        )
    if log and (kfunc := kfunc_missing_impl(log)):
        return BpfError(
            f"{action}: this kernel cannot call the kfunc {kfunc}: its BTF describes {kfunc} with the "
            f"verifier-supplied `aux` argument but has no {kfunc}_impl, which the verifier needs "
            "(a defect of this kernel build: no BPF program can call it here)",
            ExitCode.UNSUPPORTED,
            "boot another kernel of the series or a newer one (scxctl doctor checks the object on the "
            "running kernel)",
            err,
            log,
        )
    if log:
        tail = log_tail(log)
        last = verifier_reason(log) or why
        return BpfError(
            f"{action}: the verifier rejected the program ({why}): {last}",
            ExitCode.BPF,
            "verifier log tail:\n" + tail,
            err,
            log,
        )
    detail = last_warning()
    return BpfError(f"{action}: {why}" + (f" ({detail})" if detail else ""), ExitCode.BPF, None, err)
