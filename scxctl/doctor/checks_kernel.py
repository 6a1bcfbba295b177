"""Kernel checks: release, CONFIG_SCHED_CLASS_EXT, sched_ext sysfs state, loaded scheduler."""

from __future__ import annotations

from scxctl.doctor.model import CheckResult, DoctorContext, Status, check


@check("kernel.release", "Kernel release")
def kernel_release(ctx: DoctorContext) -> CheckResult:
    try:
        release = ctx.sysroot.kernel_release()
    except (OSError, UnicodeDecodeError) as exc:
        return CheckResult("kernel.release", "Kernel release", Status.WARN, f"cannot read: {exc}",
                           "check that /proc is mounted")
    return CheckResult("kernel.release", "Kernel release", Status.OK, release, details={"release": release})
