"""CPU bandwidth limits on the calling process's cgroup v2 and its ancestors.

A throttled cgroup (cpu.max quota used up) stops all its tasks until the next period: that shows
up as scheduling-latency spikes that no scheduler can fix, so doctor points at it. A parent's
limit throttles the child's tasks but is counted in the parent's cpu.stat, so every level is read.
"""

from __future__ import annotations

import posixpath
from typing import Any

from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, describe_error, result

CID = "cgroup.cpu"


class _Malformed(ValueError):
    pass


def parse_cpu_max(text: str) -> tuple[int | None, int]:
    """`cpu.max` ("max 100000" or "50000 100000") to (quota_usec or None for no limit, period_usec)."""
    parts = text.split()
    if len(parts) != 2:
        raise _Malformed(f"cpu.max {text!r} is not 'QUOTA PERIOD'")
    try:
        quota = None if parts[0] == "max" else int(parts[0])
        period = int(parts[1])
    except ValueError:
        raise _Malformed(f"cpu.max {text!r} has a non-numeric field") from None
    if period <= 0 or (quota is not None and quota <= 0):
        raise _Malformed(f"cpu.max {text!r} has a non-positive field")
    return quota, period


def parse_flat_keyed(text: str, name: str) -> dict[str, int]:
    """A flat-keyed cgroup file ("key value" per line), e.g. cpu.stat."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        try:
            values[key] = int(value)
        except ValueError:
            raise _Malformed(f"{name} line {line!r} is not 'KEY NUMBER'") from None
    return values


def _ancestry(path: str) -> list[str]:
    """The cgroup itself first, then each parent up to and including the root."""
    levels = [path]
    while path != "/":
        path = posixpath.dirname(path)
        levels.append(path)
    return levels


def _read_level(ctx: DoctorContext, directory: str, cgroup: str) -> dict[str, Any]:
    cpu_max = ctx.sysroot.read_optional(f"{directory}/cpu.max")
    stat_text = ctx.sysroot.read_optional(f"{directory}/cpu.stat")
    quota, period = parse_cpu_max(cpu_max) if cpu_max is not None else (None, None)
    stat = parse_flat_keyed(stat_text, "cpu.stat") if stat_text is not None else {}
    return {"cgroup": cgroup, "cpu_max": cpu_max, "quota_usec": quota, "period_usec": period,
            "nr_throttled": stat.get("nr_throttled"), "throttled_usec": stat.get("throttled_usec")}


def _limit_text(level: dict[str, Any]) -> str:
    return f"cpu.max {level['cpu_max']} ({level['quota_usec'] / level['period_usec']:.2f} CPUs)"


@check(CID, "cgroup v2 CPU limit and throttling")
def cgroup_cpu(ctx: DoctorContext) -> CheckResult:
    try:
        memberships = ctx.sysroot.self_cgroups()
        mount = ctx.sysroot.cgroup2_mount()
    except (OSError, UnicodeDecodeError) as exc:
        return result(CID, Status.WARN, f"cannot read /proc/self/cgroup or mountinfo: {describe_error(exc)}",
                      "check that /proc is mounted", cgroup=None)
    v2 = next((m.path for m in memberships if m.hierarchy == "0" and not m.controllers), None)
    v1_cpu = next((m for m in memberships if m.hierarchy != "0" and "cpu" in m.controllers), None)
    if v2 is None or v1_cpu is not None or mount is None:
        why = ("no cgroup v2 membership" if v2 is None else
               f"the cpu controller is on cgroup v1 (hierarchy {v1_cpu.hierarchy})" if v1_cpu is not None else
               "cgroup2 is not mounted")
        return result(CID, Status.SKIP, f"skipped: {why}; only cgroup v2 CPU limits are checked",
                      "boot with systemd.unified_cgroup_hierarchy=1 to get cgroup v2", cgroup=v2)
    levels: list[dict[str, Any]] = []
    try:
        for cg in _ancestry(v2):
            directory = mount.rstrip("/") + (cg if cg != "/" else "")
            levels.append(_read_level(ctx, directory, cg))
    except (OSError, UnicodeDecodeError) as exc:
        return result(CID, Status.WARN, f"cannot read cgroup {cg} CPU files: {describe_error(exc)}",
                      "check the cgroup2 mount", cgroup=v2, mount=mount)
    except _Malformed as exc:
        return result(CID, Status.WARN, f"cgroup {cg}: {exc}", "check the cgroup2 mount",
                      cgroup=v2, mount=mount)
    details = {"cgroup": v2, "mount": mount, "levels": levels}
    throttled = [lv for lv in levels if (lv["nr_throttled"] or 0) > 0]
    limited = [lv for lv in levels if lv["quota_usec"] is not None]
    if throttled:
        lv = max(throttled, key=lambda x: x["throttled_usec"] or 0)
        limit = f", {_limit_text(lv)}" if lv["quota_usec"] is not None else ""
        return result(CID, Status.WARN,
                      f"cgroup {lv['cgroup']} was throttled {lv['nr_throttled']} times "
                      f"({(lv['throttled_usec'] or 0) / 1000:.1f} ms){limit}: "
                      "expect scheduling-latency spikes",
                      f"raise or remove the CPU limit: echo max > {mount.rstrip('/')}{lv['cgroup']}/cpu.max "
                      "(or the unit's CPUQuota=)", **details)
    if limited:
        lv = min(limited, key=lambda x: x["quota_usec"] / x["period_usec"])
        return result(CID, Status.OK,
                      f"cgroup {v2}: limited by {lv['cgroup']} {_limit_text(lv)}, not throttled",
                      **details)
    return result(CID, Status.OK, f"cgroup {v2}: no CPU bandwidth limit (cpu.max) up to the root", **details)
