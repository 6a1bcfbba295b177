"""The checks `scxctl run` makes before it loads anything: each failure is one the user can act on."""

from __future__ import annotations

import os

from scxctl.errors import ExitCode, PermissionDenied, ScxctlError
from scxctl.sysfs import STATE_DISABLED, SysRoot, read_sched_ext


def preflight(sysroot: SysRoot) -> None:
    """The errors a user can act on, in the order worth fixing them."""
    st = read_sched_ext(sysroot)
    if not st.available:
        raise ScxctlError("this kernel cannot run sched_ext schedulers (no /sys/kernel/sched_ext)",
                          ExitCode.UNSUPPORTED,
                          hint="boot a kernel with CONFIG_SCHED_CLASS_EXT=y, or run it in the VM: "
                               "python -m tools.vm run -- scxctl run")
    if os.geteuid() != 0:
        raise PermissionDenied("scxctl run needs root (CAP_BPF and CAP_SYS_ADMIN to attach a scheduler)")
    if st.ops or (st.state is not None and st.state != STATE_DISABLED):
        raise ScxctlError(f"another sched_ext scheduler is loaded: {st.ops or '?'} (state {st.state})",
                          ExitCode.BUSY, hint="stop it first")
