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


def _refused_load(ctx: DoctorContext) -> CheckResult | None:
    """The bpf.object result when its trial load was attempted and the kernel refused the object."""
    obj = ctx.results.get("bpf.object")
    load = obj.details.get("load") if obj is not None and obj.status is Status.FAIL else None
    if isinstance(load, dict) and load.get("attempted") and not load.get("ok"):
        return obj
    return None


@check(CID, "Verdict")
def verdict(ctx: DoctorContext) -> CheckResult:
    failed = [r.id for r in ctx.results.values() if r.status is Status.FAIL and r.id != CID]
    kernel = [cid for cid in _KERNEL_CHECKS if cid in failed]
    if kernel:
        why = "; ".join(_REASONS[cid] for cid in kernel)
        return result(CID, Status.FAIL, f"THIS KERNEL CANNOT RUN sched_ext SCHEDULERS: {why}",
                      NO_SCHED_EXT_HINT, can_run_sched_ext=False, can_run_pyland=False, failed=failed)
    if failed:
        why, hint = f"{', '.join(failed)} failed", "fix the failed checks above"
        refused = _refused_load(ctx)
        if refused is not None:  # the most specific reason there is: the kernel said no to the object
            why += f"; this kernel refuses the pyland BPF object: {refused.details['load']['error']}"
            if failed == [refused.id]:
                hint = refused.hint or hint
        return result(CID, Status.FAIL, f"the kernel supports sched_ext, but pyland cannot run here: {why}",
                      hint, can_run_sched_ext=True, can_run_pyland=False, failed=failed)
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
