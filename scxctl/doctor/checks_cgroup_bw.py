"""cpu.max enforcement: does the running scheduler honour the cgroup v2 CPU quotas on this machine?

Under sched_ext the kernel throttles no cgroup for its cpu.max: since Linux 6.17 it only tells the
BPF scheduler (ops.cgroup_set_bandwidth, and bw_quota_us in ops.cgroup_init's arguments), and
before 6.17 not even that. A scheduler that ignores the hook silently turns every container quota
and systemd CPUQuota= off, and nothing else on the machine says so. This check lists the cgroups
with a quota and says who enforces them. It never fails: an unenforced quota is a policy problem,
not a reason the machine cannot run schedulers.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any

from scxctl.bpf.btf import BANDWIDTH_HOOK, sched_ext_ops_members
from scxctl.doctor.checks_cgroup import parse_cpu_max, parse_flat_keyed
from scxctl.doctor.checks_kernel import PYLAND_OPS_NAME
from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, describe_error, result
from scxctl.sysfs import STATE_DISABLED, ops_matches, read_sched_ext

CID = "cgroup.bandwidth"
HOOK = BANDWIDTH_HOOK  # the struct sched_ext_ops member Linux 6.17 added for cpu.max
MAX_DIRS = 10_000  # a walk bound: a host with many containers must not stall doctor
SHOWN = 3  # cgroup paths named in a finding
OTHER_HINT = ("quotas are only enforced by schedulers that implement ops.cgroup_set_bandwidth "
              "(pyland, scx_lavd --enable-cpu-bw)")
OLD_KERNEL_HINT = "cpu.max needs Linux 6.17+ under sched_ext"


def _walk(ctx: DoctorContext, mount: str) -> tuple[list[str], bool, list[dict[str, str]]]:
    """Every cgroup below the mount as a path relative to it ("/a/b"), breadth first, sorted per level.

    Bounded by MAX_DIRS (the bool says the walk stopped early); a directory that cannot be listed is
    reported, not raised, so one odd cgroup cannot hide the others.
    """
    base = str(ctx.sysroot.path(mount))
    found: list[str] = []
    problems: list[dict[str, str]] = []
    queue: deque[str] = deque(["/"])
    while queue:
        cg = queue.popleft()
        if len(found) >= MAX_DIRS:
            return found, True, problems
        found.append(cg)
        try:
            with os.scandir(base + (cg if cg != "/" else "")) as it:
                children = sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        except OSError as exc:
            problems.append({"cgroup": cg, "error": f"cannot list: {describe_error(exc)}"})
            continue
        queue.extend(f"{cg.rstrip('/')}/{name}" for name in children)
    return found, False, problems


def _quota(ctx: DoctorContext, directory: str, cg: str) -> dict[str, Any] | None:
    """The cgroup's quota and throttling, or None without a quota (no cpu.max, or "max").

    Raises ValueError (malformed cpu.max), OSError or UnicodeDecodeError (unreadable cpu.max).
    """
    text = ctx.sysroot.read_optional(f"{directory}/cpu.max")
    if text is None:
        return None
    quota, period = parse_cpu_max(text)
    if quota is None:
        return None
    try:  # throttling counters are a bonus: a bad cpu.stat must not drop the quota from the list
        stat_text = ctx.sysroot.read_optional(f"{directory}/cpu.stat")
        stat = parse_flat_keyed(stat_text, "cpu.stat") if stat_text is not None else {}
    except (OSError, UnicodeDecodeError, ValueError):
        stat = {}
    return {"cgroup": cg, "quota_us": quota, "period_us": period, "cpus": round(quota / period, 2),
            "nr_throttled": stat.get("nr_throttled"), "throttled_usec": stat.get("throttled_usec")}


def kernel_hooks(ctx: DoctorContext) -> bool | None:
    """Whether the kernel's struct sched_ext_ops has cgroup_set_bandwidth; None when unknowable.

    Reuses the kernel.btf check's member list when it ran (parsing vmlinux BTF twice is slow), else
    reads /sys/kernel/btf/vmlinux itself. A BTF without sched_ext_ops means no hooks (no sched_ext).
    """
    btf_result = ctx.results.get("kernel.btf")
    if btf_result is not None and "sched_ext_ops" in btf_result.details:
        ops = btf_result.details["sched_ext_ops"]
        return isinstance(ops, dict) and HOOK in ops.get("members", ())
    members = sched_ext_ops_members(ctx.sysroot)
    return None if members is None else HOOK in members


def _scheduler(ctx: DoctorContext) -> tuple[str | None, str]:
    """(ops name, kind): kind is "fair" (no sched_ext scheduler), "pyland", "other" or "unknown"."""
    st = read_sched_ext(ctx.sysroot)
    if not st.available or st.state == STATE_DISABLED:
        return None, "fair"
    if st.ops is None:  # enabled, transitional or unreadable state, but no readable name
        return None, "unknown"
    if ops_matches(st.ops, PYLAND_OPS_NAME):
        return st.ops, "pyland"
    return st.ops, "other"


def _count(n: int) -> str:
    return f"{n} cgroup" if n == 1 else f"{n} cgroups"


def _names(cgroups: list[dict[str, Any]]) -> str:
    shown = ", ".join(c["cgroup"] for c in cgroups[:SHOWN])
    return shown + (", ..." if len(cgroups) > SHOWN else "")


@check(CID, "cpu.max enforcement")
def cgroup_bandwidth(ctx: DoctorContext) -> CheckResult:
    try:
        mount = ctx.sysroot.cgroup2_mount()
    except (OSError, UnicodeDecodeError) as exc:
        return result(CID, Status.WARN, f"cannot read /proc/self/mountinfo: {describe_error(exc)}",
                      "check that /proc is mounted", cgroups=[], enforced=None, scheduler=None,
                      kernel_hooks=None)
    if mount is None:
        return result(CID, Status.SKIP, "skipped: cgroup2 is not mounted; only cgroup v2 quotas are checked",
                      "boot with systemd.unified_cgroup_hierarchy=1 to get cgroup v2", cgroups=[],
                      enforced=None, scheduler=None, kernel_hooks=None)
    try:
        controllers = ctx.sysroot.read_optional(f"{mount.rstrip('/')}/cgroup.controllers")
    except (OSError, UnicodeDecodeError):
        controllers = None  # the walk reports what it cannot read
    if controllers is not None and "cpu" not in controllers.split():
        return result(CID, Status.SKIP,
                      f"skipped: the cpu controller is not on cgroup v2 ({mount}); v1 quotas are not checked",
                      "boot with systemd.unified_cgroup_hierarchy=1 to get cgroup v2", cgroups=[],
                      enforced=None, scheduler=None, kernel_hooks=None, mount=mount)
    walked, truncated, problems = _walk(ctx, mount)
    cgroups: list[dict[str, Any]] = []
    for cg in walked:
        directory = mount.rstrip("/") + (cg if cg != "/" else "")
        try:
            quota = _quota(ctx, directory, cg)
        except (OSError, UnicodeDecodeError) as exc:
            problems.append({"cgroup": cg, "error": f"cpu.max: {describe_error(exc)}"})
            continue
        except ValueError as exc:  # checks_cgroup's malformed-file error
            problems.append({"cgroup": cg, "error": str(exc)})
            continue
        if quota is not None:
            cgroups.append(quota)
    cgroups.sort(key=lambda c: c["cgroup"])  # walked breadth first (the bound keeps the shallow ones)
    ops, kind = _scheduler(ctx)
    hooks = kernel_hooks(ctx)
    enforced = {"fair": True, "pyland": hooks, "other": None, "unknown": None}[kind]
    details = {"cgroups": cgroups, "enforced": enforced, "scheduler": ops, "kernel_hooks": hooks,
               "mount": mount, "walked": len(walked), "truncated": truncated, "problems": problems}
    notes = "".join([f"; walk stopped at {MAX_DIRS} cgroups" if truncated else "",
                     f"; {_count(len(problems))} unreadable or malformed (see details)" if problems else ""])
    if not cgroups:
        return result(CID, Status.OK, f"no cgroup has a cpu.max quota ({_count(len(walked))}){notes}",
                      **details)
    what = f"{_count(len(cgroups))} with a cpu.max quota ({_names(cgroups)})"
    if kind == "fair":
        return result(CID, Status.OK, f"{what}: enforced by the kernel (no sched_ext scheduler){notes}",
                      **details)
    if kind == "pyland" and hooks:
        return result(CID, Status.OK, f"{what}: enforced by {ops} through ops.{HOOK}{notes}", **details)
    if kind == "pyland" and hooks is False:
        return result(CID, Status.WARN,
                      f"{what}: NOT enforced, {ops} runs on a kernel without ops.{HOOK}{notes}",
                      f"{OLD_KERNEL_HINT}: boot a newer kernel, or stop {ops} to let the fair class "
                      "enforce them", **details)
    if kind == "pyland":
        return result(CID, Status.WARN,
                      f"{what}: may be ignored, cannot tell whether this kernel has ops.{HOOK}{notes}",
                      f"{OLD_KERNEL_HINT}; see the kernel.btf row", **details)
    who = f"{ops} is loaded" if ops else "a sched_ext scheduler is loaded"
    hint = OTHER_HINT if hooks is not False else f"{OLD_KERNEL_HINT} (this kernel lacks ops.{HOOK})"
    return result(CID, Status.WARN, f"{what}: may be ignored, {who} and only it decides{notes}",
                  f"{hint}; or stop the scheduler to let the fair class enforce them", **details)
