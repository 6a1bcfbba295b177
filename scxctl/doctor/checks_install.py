"""Which scxctl install runs here, which systemd unit goes with it, and does that unit start it?

A unit whose ExecStart names an executable that does not exist fails at once (203/EXEC); one that
names another install's executable supervises other code than the one that was upgraded.
"""

from __future__ import annotations

from pathlib import Path

from scxctl import install
from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, result

CID = "install"


def _dropins(ctx: DoctorContext) -> str:
    """The unit's drop-ins (`scxctl.service.d/*.conf`) in systemd's order: by file name, the first
    directory in UNIT_DIRS winning for a name found in several."""
    found: dict[str, str] = {}
    for d in install.UNIT_DIRS:
        dirname = f"{d}/{install.UNIT}.d"
        if not ctx.sysroot.is_dir(dirname):
            continue
        for conf in sorted(ctx.sysroot.path(dirname).glob("*.conf")):
            found.setdefault(conf.name, ctx.sysroot.read_optional(f"{dirname}/{conf.name}") or "")
    return "\n".join(found[name] for name in sorted(found))


def _unit(ctx: DoctorContext) -> tuple[str, str] | None:
    """(path, text with drop-ins) of the unit systemd would use, or None when none is installed."""
    for d in install.UNIT_DIRS:
        text = ctx.sysroot.read_optional(f"{d}/{install.UNIT}")
        if text is not None:
            return f"{d}/{install.UNIT}", text + "\n" + _dropins(ctx)
    return None


@check(CID, "scxctl install and unit")
def install_check(ctx: DoctorContext) -> CheckResult:
    inst = install.current()
    unit = _unit(ctx)
    details = {"kind": inst.kind, "code": str(inst.code),
               "executable": str(inst.executable) if inst.executable else None,
               "unit": unit[0] if unit else None, "unit_exec": None}
    if unit is None:
        if inst.kind == "package":
            return result(CID, Status.WARN, f"{inst.describe()}, but no {install.UNIT} is installed",
                          "reinstall the package: apt-get install --reinstall scxctl", **details)
        return result(CID, Status.OK, f"{inst.describe()}; no {install.UNIT}: `scxctl enable` starts a "
                      "detached daemon", None, **details)
    exe = install.exec_start(unit[1])
    details["unit_exec"] = str(exe) if exe else None
    where = f"{inst.describe()}; unit {unit[0]} starts {exe}"
    if exe is None or not ctx.sysroot.exists(str(exe)):
        return result(CID, Status.FAIL, f"{where}, which does not exist: the unit cannot start",
                      f"point ExecStart at {inst.executable or 'an installed scxctl'} "
                      f"(systemctl edit {install.UNIT}) and run systemctl daemon-reload", **details)
    if inst.executable is not None and Path(exe) != inst.executable:
        return result(CID, Status.WARN, f"{where}, another install than this one ({inst.executable})",
                      f"the daemon runs {exe}'s code; to supervise this install, point ExecStart at "
                      f"{inst.executable} (systemctl edit {install.UNIT})", **details)
    return result(CID, Status.OK, where, None, **details)
