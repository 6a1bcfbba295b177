"""What a guest that stopped making progress was doing, asked of QEMU before it is killed.

A guest that never reaches its command boots with a quiet console, so a hang leaves nothing to
read. Before the harness kills it, QEMU's monitor (QMP) gives each vCPU's instruction pointer,
sampled a few times (one address again and again: a vCPU stuck in a loop), and injects SysRq keys
on the emulated keyboard: the guest kernel then prints every CPU's backtrace, with symbol names,
and the tasks blocked in D state on the console. The addresses alone still place a hang too early
for the keyboard: the guest boots the uncompressed kernel (no KASLR), so they match the kernel's
-dbg package's System.map (Debian's own System.map is a placeholder).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from qemu.qmp.legacy import QEMUMonitorProtocol

from scxctl.log import get_logger

log = get_logger("tools.vm.hang")

SAMPLES = 3
SAMPLE_GAP_S = 0.3
QMP_TIMEOUT_S = 5.0
# 8: every message to the console (the boot's quiet level would hide the rest); l: a backtrace of
# every active CPU; w: the tasks blocked uninterruptibly (what a boot waits on)
SYSRQ_KEYS = ("8", "l", "w")
_RIP_RE = re.compile(r"^RIP=([0-9a-f]{16})", re.MULTILINE)
_CPU_RE = re.compile(r"^CPU#(\d+)", re.MULTILINE)


def instruction_pointers(info_registers: str) -> dict[int, int]:
    """`info registers -a` (HMP) -> {vCPU index: RIP}."""
    cpus = [(m.start(), int(m.group(1))) for m in _CPU_RE.finditer(info_registers)]
    rips: dict[int, int] = {}
    for m in _RIP_RE.finditer(info_registers):
        owner = [cpu for start, cpu in cpus if start < m.start()]
        rips[owner[-1] if owner else len(rips)] = int(m.group(1), 16)
    return rips


def report(qmp_socket: Path) -> str:
    """Sample the vCPUs and ask the guest for its backtraces; one line per sample. Never raises:
    it runs while a failure is being reported, and must not replace that failure with its own."""
    lines: list[str] = []
    try:
        qmp = QEMUMonitorProtocol(str(qmp_socket))
        qmp.connect()
        qmp.settimeout(QMP_TIMEOUT_S)
    except Exception as exc:  # qemu.qmp raises types of its own besides OSError
        return f"no QMP monitor ({exc})"
    try:
        for i in range(SAMPLES):
            regs = str(qmp.cmd("human-monitor-command", **{"command-line": "info registers -a"}))
            rips = instruction_pointers(regs)
            where = ", ".join(f"cpu{c} {r:#x}" for c, r in sorted(rips.items()))
            lines.append(f"sample {i + 1}: {where or 'no registers'}")
            time.sleep(SAMPLE_GAP_S)
        for key in SYSRQ_KEYS:
            qmp.cmd("human-monitor-command", **{"command-line": f"sendkey alt-sysrq-{key}"})
    except Exception as exc:  # as above
        lines.append(f"QMP failed ({exc})")
    finally:
        qmp.close()
    return "\n".join(lines)
