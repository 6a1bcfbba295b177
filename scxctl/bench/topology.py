"""CPU topology and per-process CPU time, read through scxctl.sysfs.SysRoot."""

from __future__ import annotations

import os
from dataclasses import dataclass

from scxctl.errors import UsageError
from scxctl.sysfs import CPU_DIR, SysRoot, parse_cpu_list


@dataclass(frozen=True)
class Topology:
    online: list[int]  # online logical CPUs
    present: list[int]  # CPUs that exist (online or not)
    cores: list[list[int]]  # logical CPUs per physical core, cores in (package, core id) order

    @property
    def first_hyperthread(self) -> int:
        """schtest's adaptive_priority CPU: the first hyperthread of the first core."""
        return self.cores[0][0]


def load_topology(sysroot: SysRoot | None = None) -> Topology:
    sr = sysroot or SysRoot()
    online = parse_cpu_list(sr.read_text(f"{CPU_DIR}/online"))
    present_text = sr.read_optional(f"{CPU_DIR}/present")
    present = parse_cpu_list(present_text) if present_text else online
    by_core: dict[tuple[int, int], list[int]] = {}
    for cpu in online:
        base = f"{CPU_DIR}/cpu{cpu}/topology"
        pkg = sr.read_optional(f"{base}/physical_package_id")
        core = sr.read_optional(f"{base}/core_id")
        key = (int(pkg) if pkg else 0, int(core) if core else cpu)
        by_core.setdefault(key, []).append(cpu)
    cores = [sorted(by_core[k]) for k in sorted(by_core)]
    return Topology(online=online, present=present, cores=cores)


def check_cpu(topo: Topology, cpu: int) -> None:
    """Refuse a CPU that does not exist, is offline, or is outside this process's affinity."""
    if cpu not in topo.present:
        raise UsageError(
            f"CPU {cpu} does not exist (present CPUs: {_fmt(topo.present)})", hint="pick one with --cpu N"
        )
    if cpu not in topo.online:
        raise UsageError(f"CPU {cpu} is offline (online CPUs: {_fmt(topo.online)})")
    allowed = os.sched_getaffinity(0)
    if cpu not in allowed:
        raise UsageError(f"CPU {cpu} is outside this process's CPU affinity ({_fmt(sorted(allowed))})")


def _fmt(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


def process_cpu_time_s(pid: int, sysroot: SysRoot | None = None) -> float:
    """utime + stime summed over /proc/PID/task/*/stat, in seconds (schtest's total_time)."""
    sr = sysroot or SysRoot()
    ticks = 0
    for task in sr.path(f"/proc/{pid}/task").iterdir():
        try:
            stat = sr.read_text(f"/proc/{pid}/task/{task.name}/stat")
        except FileNotFoundError:
            continue  # the thread exited between listing and reading
        # comm (field 2) may contain spaces and parentheses: split after the last ')'
        fields = stat.rpartition(")")[2].split()
        ticks += int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)
    return ticks / os.sysconf("SC_CLK_TCK")
