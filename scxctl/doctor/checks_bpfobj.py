"""The pyland BPF object: which one the loader will use, was it built from these sources, and does
this kernel accept it?

A stale object loaded from another path than the build wrote can cost days of debugging; this check
names the object `scxctl run` would load, compares its embedded source hash with the checkout's
bpf/ sources, and warns when several candidate objects with different hashes exist.

A fresh object can still be refused by the running kernel (a kfunc whose prototype changed, a
verifier rule an older kernel enforces), and `scxctl run` would then fail with exit 7 while every
row above says ok. So when the kernel has sched_ext and we may use bpf(), the object is loaded
exactly as `scxctl run` loads it -- every program verified, every kfunc resolved -- and closed
without attaching: a `.struct_ops.link` map is only registered at attach, so the running
scheduler is never replaced.
"""

from __future__ import annotations

from typing import Any

from scxctl.bpf import object as bpfobject
from scxctl.bpf.verifier_log import log_tail
from scxctl.caps import CAP_BPF, CAP_NAMES, CAP_SYS_ADMIN, CapsError, read_caps
from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, describe_error, result
from scxctl.errors import ExitCode, ScxctlError
from scxctl.sysfs import SCHED_EXT_DIR

CID = "bpf.object"
_BUILD_HINT = "build it with: make -C bpf"


def _short(h: str | None) -> str:
    return h[:12] if h else "none"


def _release(ctx: DoctorContext) -> str:
    try:
        return ctx.sysroot.kernel_release()
    except (OSError, UnicodeDecodeError):  # kernel.release reports why
        return "unknown release"


def _why_not_load(ctx: DoctorContext) -> str | None:
    """Why a trial load cannot tell anything here, or None when it can be attempted."""
    if not ctx.sysroot.is_dir(SCHED_EXT_DIR):
        return f"no {SCHED_EXT_DIR}: this kernel has no sched_ext (see kernel.sched_ext_sysfs)"
    try:
        missing = read_caps(ctx.sysroot).missing_effective(CAP_BPF, CAP_SYS_ADMIN)
    except (OSError, UnicodeDecodeError, CapsError) as exc:
        why = str(exc) if isinstance(exc, CapsError) else describe_error(exc)
        return f"capabilities unreadable ({why}; see privileges)"
    if missing:
        # unprivileged, the load would fail with EPERM and say nothing about the object
        names = " and ".join(CAP_NAMES[c] for c in missing)
        return f"not privileged: {names} not effective (run doctor as root to try a load)"
    for cid, what in (("bpf.syscall", "bpf() does not work here"), ("libbpf", "libbpf is unusable")):
        earlier = ctx.results.get(cid)
        if earlier is not None and earlier.status is Status.FAIL:
            return f"{what} (see {cid})"
    return None


def _skipped(reason: str) -> dict[str, Any]:
    return {"attempted": False, "reason": reason}


@check(CID, "pyland BPF object")
def bpf_object(ctx: DoctorContext) -> CheckResult:
    v = bpfobject.inspect()
    details = v.details()
    if v.chosen is None:
        looked = ", ".join(str(c.path) for c in v.candidates)
        return result(CID, Status.FAIL, f"no pyland BPF object (looked at {looked})", _BUILD_HINT, **details,
                      load=_skipped("no object to load"))
    c = v.chosen
    where = f"{c.path} ({c.origin})"
    if c.error:
        return result(CID, Status.FAIL, f"{where}: {c.error}", _BUILD_HINT, **details,
                      load=_skipped("the object's build metadata is unreadable"))
    if v.fresh is False:
        why = "has no build metadata" if c.info is None else (
            f"is stale: built from sources {_short(c.info.source_hash)}, "
            f"bpf/ is now {_short(v.sources_hash)}")
        return result(CID, Status.FAIL, f"{where} {why}", "rebuild with: make -C bpf", **details,
                      load=_skipped("the object is stale: scxctl run refuses it without --allow-stale"))

    others = v.conflicting
    built = f", built {c.info.built_at}" if c.info else ""
    state = ", which matches the bpf/ sources" if v.fresh else " (no bpf/ sources here to compare it with)"
    if others:
        listed = "; ".join(f"{o.path} ({o.origin}, hash {_short(o.info.source_hash if o.info else None)})"
                           for o in others)
        status, finding = Status.WARN, f"using {where}{state}; other objects differ: {listed}"
        hint: str | None = "remove or rebuild the other objects so only one pyland.bpf.o can be picked up"
    else:
        status, finding, hint = Status.OK, f"using {where}{state}{built}", None

    skip = _why_not_load(ctx)
    if skip is not None:
        return result(CID, status, f"{finding}; load not tried: {skip}", hint, **details, load=_skipped(skip))
    release = _release(ctx)
    try:
        ctx.bpf_load(c.path, ctx.sysroot)
    except ScxctlError as exc:
        # exactly the text `scxctl run` prints after "error:", so the two can be matched up
        reason = " ".join(exc.message.split())
        log = getattr(exc, "log", "")
        refused = exc.code in (ExitCode.BPF, ExitCode.UNSUPPORTED)  # not e.g. EPERM under lockdown
        hint = (f"this pyland object does not support kernel {release}: rebuild it (make -C bpf) from "
                "sources that support this kernel, or upgrade the kernel; `scxctl -v run` shows libbpf's log"
                if refused or not exc.hint else exc.hint)
        return result(
            CID, Status.FAIL, f"{where} does not load on this kernel ({release}): {reason}", hint, **details,
            load={"attempted": True, "ok": False, "kernel": release, "error": reason,
                  "errno": getattr(exc, "errno", None), "exit_code": int(exc.code),
                  "verifier_log_tail": log_tail(log) if log else None},
        )
    return result(CID, status, f"{finding}; loaded on this kernel ({release}) without attaching", hint,
                  **details, load={"attempted": True, "ok": True, "kernel": release, "error": None})
