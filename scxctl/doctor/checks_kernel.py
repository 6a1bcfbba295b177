"""Kernel checks: release, CONFIG_SCHED_CLASS_EXT, sched_ext sysfs state, loaded scheduler, isolcpus."""

from __future__ import annotations

import contextlib
import gzip
import zlib

from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, describe_error, result
from scxctl.sysfs import SCHED_EXT_DIR, STATE_DISABLED, STATE_ENABLED, ops_matches, read_sched_ext

PYLAND_OPS_NAME = "pyland"  # the name pyland's struct sched_ext_ops registers (shown in root/ops)
CONFIG_OPTION = "CONFIG_SCHED_CLASS_EXT"
# What to do when the kernel has no sched_ext; the verdict check repeats it.
NO_SCHED_EXT_HINT = (
    "boot a kernel built with CONFIG_SCHED_CLASS_EXT=y (Debian: trixie-backports "
    "linux-image-cloud-amd64), or use the VM: python -m tools.vm run -- scxctl doctor"
)
# The same advice, short, for the rows above the verdict.
SEE_VERDICT_HINT = "boot a kernel built with CONFIG_SCHED_CLASS_EXT=y (see the verdict row)"
# Extra options worth reporting next to the answer (sched_ext needs BPF and BTF).
_RELATED = ("CONFIG_SCHED_CLASS_EXT", "CONFIG_BPF_SYSCALL", "CONFIG_BPF_JIT", "CONFIG_DEBUG_INFO_BTF")


@check("kernel.release", "Kernel release")
def kernel_release(ctx: DoctorContext) -> CheckResult:
    try:
        release = ctx.sysroot.kernel_release()
    except (OSError, UnicodeDecodeError) as exc:
        return result("kernel.release", Status.WARN, f"cannot read the release: {describe_error(exc)}",
                      "check that /proc is mounted")
    return result("kernel.release", Status.OK, release, release=release)


def parse_kconfig(text: str) -> dict[str, str]:
    """`CONFIG_X=value` lines to {name: value}; `# CONFIG_X is not set` becomes "n"."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("CONFIG_") and "=" in line:
            name, _, value = line.partition("=")
            values[name] = value.strip('"')
        elif line.startswith("# CONFIG_") and line.endswith(" is not set"):
            values[line[2:-len(" is not set")]] = "n"
    return values


def _read_kconfig(ctx: DoctorContext, path: str, gzipped: bool) -> dict[str, str]:
    """A kernel config file parsed; raises ValueError naming the problem (FileNotFoundError when absent)."""
    raw = ctx.sysroot.read_bytes(path)
    if not raw:
        raise ValueError("empty file")
    if gzipped:
        try:
            raw = gzip.decompress(raw)
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise ValueError(f"not valid gzip ({exc})") from exc
    values = parse_kconfig(raw.decode("utf-8", errors="replace"))
    if not values:
        raise ValueError("no CONFIG_ lines: not a kernel config")
    return values


@check("kernel.config_sched_ext", "CONFIG_SCHED_CLASS_EXT")
def config_sched_ext(ctx: DoctorContext) -> CheckResult:
    cid = "kernel.config_sched_ext"
    sources = ["/proc/config.gz"]
    with contextlib.suppress(OSError, UnicodeDecodeError):  # kernel.release reports it
        sources.append(f"/boot/config-{ctx.sysroot.kernel_release()}")
    problems: dict[str, str] = {}
    for source in sources:
        try:
            values = _read_kconfig(ctx, source, gzipped=source.endswith(".gz"))
        except FileNotFoundError:
            problems[source] = "absent"
            continue
        except (OSError, ValueError) as exc:
            problems[source] = describe_error(exc) if isinstance(exc, OSError) else str(exc)
            continue
        value = values.get(CONFIG_OPTION, "n")
        details = {"source": source, "value": value, "options": {k: values.get(k, "n") for k in _RELATED},
                   "problems": problems}
        if value == "y":
            return result(cid, Status.OK, f"{CONFIG_OPTION}=y (from {source})", **details)
        return result(cid, Status.FAIL,
                      f"{CONFIG_OPTION} is not set (from {source}): this kernel has no sched_ext class",
                      SEE_VERDICT_HINT, **details)
    found = "; ".join(f"{path}: {why}" for path, why in problems.items())
    return result(cid, Status.WARN, f"cannot tell, no readable kernel config ({found})",
                  "modprobe configs (for /proc/config.gz) or install the kernel's /boot/config file; "
                  "the sysfs check decides meanwhile",
                  source=None, value=None, options={}, problems=problems)


@check("kernel.sched_ext_sysfs", "/sys/kernel/sched_ext")
def sched_ext_sysfs(ctx: DoctorContext) -> CheckResult:
    cid = "kernel.sched_ext_sysfs"
    if ctx.sysroot.is_dir(SCHED_EXT_DIR):
        return result(cid, Status.OK, f"{SCHED_EXT_DIR} present: the sched_ext class is built in",
                      present=True)
    if ctx.sysroot.exists(SCHED_EXT_DIR):
        return result(cid, Status.FAIL, f"{SCHED_EXT_DIR} exists but is not a directory",
                      "check what mounts or writes over /sys/kernel", present=False)
    return result(cid, Status.FAIL,
                  f"{SCHED_EXT_DIR} is missing: this kernel cannot run sched_ext schedulers",
                  SEE_VERDICT_HINT, present=False)


def _sysfs_missing(ctx: DoctorContext, cid: str) -> CheckResult | None:
    if ctx.sysroot.is_dir(SCHED_EXT_DIR):
        return None
    return result(cid, Status.SKIP, f"skipped: {SCHED_EXT_DIR} is missing",
                  "see kernel.sched_ext_sysfs")


@check("sched_ext.state", "sched_ext state")
def sched_ext_state(ctx: DoctorContext) -> CheckResult:
    cid = "sched_ext.state"
    if (skip := _sysfs_missing(ctx, cid)) is not None:
        return skip
    try:
        state = ctx.sysroot.read_text(f"{SCHED_EXT_DIR}/state")
    except (OSError, UnicodeDecodeError) as exc:
        return result(cid, Status.WARN, f"cannot read {SCHED_EXT_DIR}/state: {describe_error(exc)}",
                      "the kernel's sched_ext sysfs looks damaged; check dmesg", state=None)
    st = read_sched_ext(ctx.sysroot)
    details = {"state": state, "switch_all": st.switch_all, "nr_rejected": st.nr_rejected,
               "enable_seq": st.enable_seq}
    if state == STATE_DISABLED:
        return result(cid, Status.OK, "disabled: no sched_ext scheduler is running", **details)
    if state == STATE_ENABLED:
        scope = "all tasks" if st.switch_all else "tasks that opted in (SCHED_EXT)"
        return result(cid, Status.OK, f"enabled: a sched_ext scheduler runs {scope}", **details)
    if state in ("enabling", "disabling"):
        return result(cid, Status.WARN, f"{state}: a scheduler is being loaded or unloaded",
                      "run doctor again in a few seconds", **details)
    return result(cid, Status.WARN, f"unexpected state {state!r}",
                  "this kernel's sched_ext reports a state scxctl does not know; check dmesg", **details)


@check("sched_ext.loaded", "Loaded sched_ext scheduler")
def sched_ext_loaded(ctx: DoctorContext) -> CheckResult:
    cid = "sched_ext.loaded"
    if (skip := _sysfs_missing(ctx, cid)) is not None:
        return skip
    try:
        ops = ctx.sysroot.read_optional(f"{SCHED_EXT_DIR}/root/ops")
    except (OSError, UnicodeDecodeError) as exc:
        return result(cid, Status.WARN, f"cannot read {SCHED_EXT_DIR}/root/ops: {describe_error(exc)}",
                      "check dmesg for sched_ext messages", ops=None, ours=None)
    if not ops:
        return result(cid, Status.OK, "none: a scheduler can be enabled", ops=None, ours=None)
    if ops_matches(ops, PYLAND_OPS_NAME):
        return result(cid, Status.OK, f"{ops} (pyland, ours) is loaded", ops=ops, ours=True)
    return result(cid, Status.WARN,
                  f"another scheduler is loaded ({ops}): enabling pyland would fail with EBUSY",
                  f"stop {ops} first (e.g. `systemctl stop scx_loader` or end the process that loaded it)",
                  ops=ops, ours=False)


def _kernel_params(cmdline: str) -> list[str]:
    """Kernel parameters only: what follows `--` goes to init."""
    params = cmdline.split()
    return params[: params.index("--")] if "--" in params else params


@check("kernel.isolcpus", "isolcpus= on the kernel command line")
def isolcpus(ctx: DoctorContext) -> CheckResult:
    cid = "kernel.isolcpus"
    try:
        cmdline = ctx.sysroot.cmdline()
    except (OSError, UnicodeDecodeError) as exc:
        return result(cid, Status.WARN, f"cannot read /proc/cmdline: {describe_error(exc)}",
                      "check that /proc is mounted", isolcpus=None)
    values = [p.partition("=")[2] for p in _kernel_params(cmdline) if p.startswith("isolcpus=")]
    if not values:
        return result(cid, Status.OK, "no isolcpus= on the kernel command line", isolcpus=None)
    return result(cid, Status.WARN,
                  f"isolcpus={values[-1]} is set: some kernels refuse to enable sched_ext with isolated CPUs",
                  "boot without isolcpus= (use cpusets/cgroups to isolate CPUs instead)", isolcpus=values[-1])
