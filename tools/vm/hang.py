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

import asyncio
import re
from pathlib import Path

from qemu.qmp import QMPClient

SAMPLES = 3
SAMPLE_GAP_S = 0.3
REPORT_TIMEOUT_S = 10.0
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
    """Sample the vCPUs and ask the guest for its backtraces; one line per sample. Never raises and
    never waits past REPORT_TIMEOUT_S (a QEMU stuck in its main loop would never answer): it runs
    while a failure is being reported, and must neither replace that failure nor hold it up."""
    lines: list[str] = []
    try:
        asyncio.run(asyncio.wait_for(_ask(qmp_socket, lines), REPORT_TIMEOUT_S))
    except TimeoutError:
        lines.append(f"QMP did not answer within {REPORT_TIMEOUT_S:g} s")
    except Exception as exc:  # qemu.qmp raises types of its own besides OSError
        lines.append(f"QMP failed ({exc})")
    return "\n".join(lines)


async def _ask(qmp_socket: Path, lines: list[str]) -> None:
    qmp = QMPClient("scxvm")
    await qmp.connect(str(qmp_socket))
    try:
        for i in range(SAMPLES):
            regs = await qmp.execute("human-monitor-command", {"command-line": "info registers -a"})
            rips = instruction_pointers(str(regs))
            where = ", ".join(f"cpu{c} {r:#x}" for c, r in sorted(rips.items()))
            lines.append(f"sample {i + 1}: {where or 'no registers'}")
            await asyncio.sleep(SAMPLE_GAP_S)
        for key in SYSRQ_KEYS:
            await qmp.execute("human-monitor-command", {"command-line": f"sendkey alt-sysrq-{key}"})
    finally:
        await qmp.disconnect()
