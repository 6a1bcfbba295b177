"""Privileges: who we are, which capabilities are effective, and whether bpf(2) really works.

Not being root is a warning, not a failure: doctor is useful unprivileged, and the daemon loads
schedulers on a user's behalf. Being root *without* the capabilities (a restricted container) fails.
"""

from __future__ import annotations

import errno

from scxctl.caps import CAP_BPF, CAP_NAMES, CAP_SYS_ADMIN, CapsError, read_caps
from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, describe_error, result

_NEEDED = (CAP_BPF, CAP_SYS_ADMIN)
_ROOT_HINT = "run as root (sudo scxctl ...), or grant CAP_BPF and CAP_SYS_ADMIN"


@check("privileges", "Root or CAP_BPF + CAP_SYS_ADMIN")
def privileges(ctx: DoctorContext) -> CheckResult:
    cid = "privileges"
    euid = ctx.euid()
    who = "root" if euid == 0 else f"uid {euid}"
    try:
        caps = read_caps(ctx.sysroot)
    except (OSError, UnicodeDecodeError, CapsError) as exc:
        why = describe_error(exc) if not isinstance(exc, CapsError) else str(exc)
        return result(cid, Status.WARN, f"{who}; capability sets unreadable from /proc/self/status: {why}",
                      "check that /proc is mounted" if euid == 0 else _ROOT_HINT,
                      euid=euid, cap_eff=None, missing=None)
    missing = [CAP_NAMES[c] for c in caps.missing_effective(*_NEEDED)]
    details = {"euid": euid, "cap_eff": f"{caps.effective:016x}", "missing": missing}
    if not missing:
        return result(cid, Status.OK, f"{who}, CAP_BPF and CAP_SYS_ADMIN effective", **details)
    if euid == 0:
        return result(cid, Status.FAIL,
                      f"root, but {' and '.join(missing)} not effective (restricted container?)",
                      "run on the host or in a privileged container (CAP_BPF and CAP_SYS_ADMIN)", **details)
    return result(cid, Status.WARN,
                  f"{who} without {' and '.join(missing)}: loading a scheduler needs root",
                  _ROOT_HINT, **details)


_ERRNO_HINTS = {
    errno.EPERM: "bpf() needs root or CAP_BPF + CAP_SYS_ADMIN; containers and seccomp profiles must allow it",
    errno.EACCES: "bpf() needs root or CAP_BPF + CAP_SYS_ADMIN (kernel lockdown can also refuse it)",
    errno.ENOSYS: "the kernel was built without CONFIG_BPF_SYSCALL",
    errno.ENOMEM: "raise RLIMIT_MEMLOCK (ulimit -l) or check memory cgroup limits",
}


@check("bpf.syscall", "bpf() syscall works")
def bpf_syscall(ctx: DoctorContext) -> CheckResult:
    cid = "bpf.syscall"
    try:
        ctx.bpf_probe()
    except OSError as exc:
        code = exc.errno or 0
        name = errno.errorcode.get(code, str(code))
        finding = f"creating a BPF array map failed: {name} ({exc.strerror or describe_error(exc)})"
        details = {"errno": code, "error": name}
        priv = ctx.results.get("privileges")
        unprivileged = priv is not None and priv.status is Status.WARN and priv.details.get("euid") != 0
        if unprivileged and code in (errno.EPERM, errno.EACCES):
            return result(cid, Status.WARN, finding + ", as expected without privileges", _ROOT_HINT,
                          **details)
        hint = _ERRNO_HINTS.get(code, "see dmesg for the reason")
        return result(cid, Status.FAIL, finding, hint, **details)
    return result(cid, Status.OK, "created and closed a BPF array map", errno=None, error=None)
