"""The last row: one plain sentence on whether this machine can run sched_ext schedulers and pyland.

It reads the results of the checks before it, so it must stay last in the registry order.
"""

from __future__ import annotations

from scxctl.doctor.checks_kernel import NO_SCHED_EXT_HINT
from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, result

CID = "verdict"
# The checks whose failure means the kernel itself cannot run any sched_ext scheduler.
_KERNEL_CHECKS = ("kernel.config_sched_ext", "kernel.sched_ext_sysfs", "kernel.btf")
_REASONS = {
    "kernel.config_sched_ext": "CONFIG_SCHED_CLASS_EXT is not set",
    "kernel.sched_ext_sysfs": "/sys/kernel/sched_ext is missing",
    "kernel.btf": "the kernel BTF has no usable struct sched_ext_ops",
}


@check(CID, "Verdict")
def verdict(ctx: DoctorContext) -> CheckResult:
    failed = [r.id for r in ctx.results.values() if r.status is Status.FAIL and r.id != CID]
    kernel = [cid for cid in _KERNEL_CHECKS if cid in failed]
    if kernel:
        why = "; ".join(_REASONS[cid] for cid in kernel)
        return result(CID, Status.FAIL, f"THIS KERNEL CANNOT RUN sched_ext SCHEDULERS: {why}",
                      NO_SCHED_EXT_HINT, can_run_sched_ext=False, can_run_pyland=False, failed=failed)
    if failed:
        return result(CID, Status.FAIL,
                      "the kernel supports sched_ext, but pyland cannot run here: "
                      f"{', '.join(failed)} failed",
                      "fix the failed checks above", can_run_sched_ext=True, can_run_pyland=False,
                      failed=failed)
    loaded = ctx.results.get("sched_ext.loaded")
    if loaded is not None and loaded.details.get("ours") is False:
        return result(CID, Status.WARN,
                      f"this machine can run sched_ext schedulers, but {loaded.details['ops']} is loaded now",
                      loaded.hint, can_run_sched_ext=True, can_run_pyland=True, failed=failed)
    priv = ctx.results.get("privileges")
    if priv is not None and priv.status is not Status.OK:
        return result(CID, Status.WARN,
                      "this kernel can run sched_ext schedulers and pyland; loading one needs privileges",
                      priv.hint, can_run_sched_ext=True, can_run_pyland=True, failed=failed)
    return result(CID, Status.OK, "this machine can run sched_ext schedulers and pyland",
                  can_run_sched_ext=True, can_run_pyland=True, failed=failed)
