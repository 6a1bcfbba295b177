"""bcc for `scxctl trace`: the module, the running kernel's headers, and a trial compile and load.

Optional for everything else, so it warns and never fails. Cheap where a compile cannot work: the
compile (seconds, tens of seconds under emulation) runs only when bcc and the headers are present,
doctor is root and the bpf() syscall worked; otherwise the row says what was skipped and why.
"""

from __future__ import annotations

from pathlib import Path

from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, result
from scxctl.errors import ScxctlError
from scxctl.trace import deps

CID = "bcc"
# What the tracer needs, loaded but not attached: bcc with the headers its helpers include, the
# tracer's flags, and a task member read at the offset the kernel's BTF gives (as the tracer reads)
TRIAL = """int scxctl_doctor(struct bpf_raw_tracepoint_args *ctx)
{
    u32 pid = 0;
    bpf_probe_read_kernel(&pid, sizeof(pid), (const char *)ctx->args[0] + PID_OFFSET);
    return pid ? 0 : 1;
}
"""


def trial_compile() -> None:
    """Compile and load TRIAL with the tracer's flags, then unload; raises ScxctlError with bcc's reason."""
    from scxctl.trace.wakeup import compile_program, kernel_layout

    pid_offset = kernel_layout({"task_struct": ("pid",)}).at("task_struct", "pid")
    bpf = compile_program(TRIAL.replace("PID_OFFSET", str(pid_offset)))
    try:
        bpf.load_func("scxctl_doctor", bpf.RAW_TRACEPOINT)
    except Exception as exc:  # bcc raises bare Exception when the kernel refuses a program
        raise ScxctlError(f"the kernel refused the trial program: {exc}") from None
    finally:
        bpf.cleanup()


@check(CID, "bcc (for scxctl trace)")
def bcc(ctx: DoctorContext) -> CheckResult:
    rel = ctx.sysroot.kernel_release()
    modules = ctx.sysroot.path("/lib/modules")
    install = deps.install_line(rel)
    if not deps.bcc_importable():
        return result(CID, Status.WARN, "the bcc Python module is not installed: `scxctl trace` cannot run",
                      install, bcc=False, headers=None, compiled=False, reason="no bcc")
    hdr = deps.headers_dir(rel, Path(modules))
    if hdr is None:
        return result(CID, Status.WARN,
                      f"bcc found, but no kernel headers for {rel} (/lib/modules/{rel}/build)",
                      f"apt install {deps.headers_package(rel)} (or {deps.HEADERS_META[0]} / "
                      f"{deps.HEADERS_META[1]}, which follow the default kernel)",
                      bcc=True, headers=None, compiled=False,
                      reason="no headers")
    skip = None
    if ctx.euid() != 0:
        skip = "not root"
    else:
        probe = ctx.results.get("bpf.syscall")
        if probe is not None and probe.status is Status.FAIL:
            skip = "the bpf() syscall failed"
    details = {"bcc": True, "headers": str(hdr)}
    if skip is not None:
        return result(CID, Status.OK, f"bcc and the headers for {rel} found; trial compile skipped ({skip})",
                      **details, compiled=False, reason=skip)
    try:
        trial_compile()
    except ScxctlError as exc:
        return result(CID, Status.WARN, f"bcc could not compile or load a program: {exc.message}",
                      install, **details, compiled=False, reason="compile failed")
    return result(CID, Status.OK, f"bcc compiles and loads programs against the headers for {rel}",
                  **details, compiled=True, reason=None)
