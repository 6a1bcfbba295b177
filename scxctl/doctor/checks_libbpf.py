"""libbpf.so.1: present and new enough (pyland loads its struct_ops object through libbpf via ctypes)."""

from __future__ import annotations

import ctypes
import re
from typing import Any

from scxctl.bpf.libbpf_api import LIBBPF_SONAME, MIN_VERSION  # declarations only: loads nothing
from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, result

_INSTALL_HINT = ("apt-get install libbpf1 (Debian 12: apt-get install -t bookworm-backports libbpf1; "
                 "Debian 13 and newer: the default one)")


def libbpf_version(lib: Any) -> tuple[int, int] | None:
    """(major, minor) from libbpf_major/minor_version(), else libbpf_version_string(); None if neither."""
    try:
        major, minor = lib.libbpf_major_version, lib.libbpf_minor_version
    except AttributeError:
        pass
    else:
        major.restype = minor.restype = ctypes.c_uint32
        return int(major()), int(minor())
    try:
        version_string = lib.libbpf_version_string
    except AttributeError:
        return None
    version_string.restype = ctypes.c_char_p
    raw = version_string()
    m = re.match(rb"v?(\d+)\.(\d+)", raw or b"")
    return (int(m.group(1)), int(m.group(2))) if m else None


@check("libbpf", "libbpf >= 1.4")
def libbpf(ctx: DoctorContext) -> CheckResult:
    cid = "libbpf"
    need = ".".join(map(str, MIN_VERSION))
    try:
        lib = ctx.load_library(LIBBPF_SONAME)
    except OSError as exc:
        return result(cid, Status.FAIL, f"{LIBBPF_SONAME} not found ({exc}): required to run pyland",
                      _INSTALL_HINT, found=False, version=None)
    version = libbpf_version(lib)
    if version is None:
        return result(cid, Status.WARN, f"{LIBBPF_SONAME} found, but it does not report its version",
                      f"make sure it is libbpf >= {need}: {_INSTALL_HINT}", found=True, version=None)
    text = f"{version[0]}.{version[1]}"
    if version < MIN_VERSION:
        return result(cid, Status.FAIL, f"libbpf {text} is older than {need}, required to run pyland",
                      _INSTALL_HINT, found=True, version=text)
    return result(cid, Status.OK, f"libbpf {text} ({LIBBPF_SONAME})", found=True, version=text)
