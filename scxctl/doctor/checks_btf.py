"""Kernel BTF: present, valid, and describing `struct sched_ext_ops` (libbpf needs it to load struct_ops)."""

from __future__ import annotations

from scxctl.bpf.btf import Btf, BTFError, Kind
from scxctl.doctor.checks_kernel import SEE_VERDICT_HINT
from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, describe_error, result
from scxctl.sysfs import VMLINUX_BTF

OPS_STRUCT = "sched_ext_ops"


@check("kernel.btf", "Kernel BTF with sched_ext_ops")
def kernel_btf(ctx: DoctorContext) -> CheckResult:
    cid = "kernel.btf"
    btf_hint = "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y (every Debian kernel has it)"
    try:
        data = ctx.sysroot.read_bytes(VMLINUX_BTF)
    except FileNotFoundError:
        return result(cid, Status.FAIL, f"{VMLINUX_BTF} is missing: the kernel exposes no BTF", btf_hint,
                      present=False)
    except OSError as exc:
        return result(cid, Status.FAIL, f"cannot read {VMLINUX_BTF}: {describe_error(exc)}", btf_hint,
                      present=True)
    try:
        btf = Btf(data)
        ops = btf.find(Kind.STRUCT, OPS_STRUCT)
    except BTFError as exc:
        return result(cid, Status.FAIL, f"{VMLINUX_BTF} is not valid BTF: {exc}", btf_hint,
                      present=True, size=len(data))
    details = {"present": True, "size": len(data), "nr_types": btf.nr_types}
    if ops is None:
        return result(cid, Status.FAIL,
                      f"{btf.nr_types} types but no struct {OPS_STRUCT}: the kernel has no sched_ext",
                      SEE_VERDICT_HINT, **details, sched_ext_ops=None)
    return result(cid, Status.OK,
                  f"struct {OPS_STRUCT} found (type {ops.id}, {ops.vlen} members, {ops.size_or_type} bytes)",
                  **details, sched_ext_ops={"type_id": ops.id, "members": list(ops.members),
                                            "size": ops.size_or_type})
