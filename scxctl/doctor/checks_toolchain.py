"""Toolchain for *building* the BPF object (clang, bpftool); running pyland needs neither, so warn only."""

from __future__ import annotations

import os
import re
from pathlib import Path

from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, result

MIN_CLANG = 16  # sched_ext BPF code (scx headers) needs clang >= 16
MIN_BPFTOOL = (7, 5)  # the version the BPF build was checked with (older ones miss kfunc prototypes)
_CLANG_NAME = re.compile(r"^clang(?:-(\d+))?$")


def find_programs(search_path: str, pattern: re.Pattern[str]) -> list[Path]:
    """Executables whose name matches `pattern`, in PATH order, first occurrence of each name."""
    found: dict[str, Path] = {}
    for d in search_path.split(os.pathsep):
        try:
            entries = sorted(Path(d or ".").iterdir())
        except OSError:
            continue
        for p in entries:
            if pattern.match(p.name) and p.name not in found and p.is_file() and os.access(p, os.X_OK):
                found[p.name] = p
    return list(found.values())


def _clang_version(text: str) -> tuple[int, int, int] | None:
    m = re.search(r"clang version (\d+)\.(\d+)(?:\.(\d+))?", text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


@check("toolchain.clang", "clang (to build the BPF object)")
def clang(ctx: DoctorContext) -> CheckResult:
    cid = "toolchain.clang"
    hint = "apt-get install clang-19 llvm-19 (only needed to build the BPF object)"
    candidates = find_programs(ctx.search_path, _CLANG_NAME)
    if not candidates:
        return result(cid, Status.WARN, "no clang or clang-NN on PATH: needed only to build the BPF object",
                      hint, path=None, version=None, candidates=[])
    versions: list[tuple[tuple[int, int, int], Path]] = []
    errors: list[str] = []
    for path in candidates:
        out = ctx.run([str(path), "--version"])
        version = _clang_version(out.output) if out.returncode == 0 else None
        if version is None:
            first = out.output.strip().splitlines()[0] if out.output.strip() else f"exit {out.returncode}"
            errors.append(f"{path}: {first}")
        else:
            versions.append((version, path))
    names = [str(p) for p in candidates]
    if not versions:
        return result(cid, Status.WARN, f"found {', '.join(names)} but none reports a clang version "
                      f"({'; '.join(errors)})", hint, path=None, version=None, candidates=names)
    version, path = max(versions)
    text = ".".join(map(str, version))
    details = {"path": str(path), "version": text, "candidates": names}
    if version[0] < MIN_CLANG:
        return result(cid, Status.WARN, f"clang {text} ({path}) is older than {MIN_CLANG}: "
                      "it cannot build the sched_ext BPF object", hint, **details)
    return result(cid, Status.OK, f"clang {text} ({path})", **details)


@check("toolchain.bpftool", "bpftool (to build the BPF object)")
def bpftool(ctx: DoctorContext) -> CheckResult:
    cid = "toolchain.bpftool"
    need = ".".join(map(str, MIN_BPFTOOL))
    hint = ("apt-get install bpftool (Debian 12: apt-get install -t bookworm-backports bpftool); "
            "only needed to build the BPF object")
    found = find_programs(ctx.search_path, re.compile(r"^bpftool$"))
    if not found:
        return result(cid, Status.WARN, "bpftool not on PATH: needed to generate vmlinux.h and the skeleton",
                      hint, path=None, version=None)
    path = found[0]
    out = ctx.run([str(path), "--version"])
    m = re.search(r"v(\d+)\.(\d+)(?:\.(\d+))?", out.output) if out.returncode == 0 else None
    if m is None:
        first = out.output.strip().splitlines()[0] if out.output.strip() else f"exit {out.returncode}"
        return result(cid, Status.WARN, f"{path} does not report a version ({first})", hint,
                      path=str(path), version=None)
    version = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    text = ".".join(map(str, version))
    lib = re.search(r"using libbpf (v\S+)", out.output)
    details = {"path": str(path), "version": text, "libbpf": lib.group(1) if lib else None}
    if version[:2] < MIN_BPFTOOL:
        return result(cid, Status.WARN, f"bpftool {text} ({path}) is older than {need}", hint, **details)
    return result(cid, Status.OK, f"bpftool {text} ({path})", **details)
