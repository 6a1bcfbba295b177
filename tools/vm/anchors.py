"""`python -m tools.vm.anchors`: the kernel's own example schedulers, built for the guest kernel.

A benchmark needs a known reference to run beside our scheduler: scx_simple (and scx_qmap) from
tools/sched_ext of Debian's `linux-source-<series>`, the same source the guest kernel was built from.
They are compiled on the host against the guest kernel's BTF (the vmlinux tools.vm.kernel extracts
for the PVH boot carries .BTF) and link libbpf statically, so they run in the guest as they are.

Built once per kernel release and cached under the harness cache dir; the source tree is unpacked
only in part (what tools/sched_ext and its bundled libbpf and bpftool need) and deleted afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scxctl.fsutil import atomic_write_bytes, atomic_write_text
from scxctl.log import get_logger
from scxctl.ui import report_error
from tools import clikit
from tools.vm import config, kernel
from tools.vm.apt import PrivateApt, sort_versions
from tools.vm.codes import VMError

log = get_logger("tools.vm.anchors")

PROG = "tools.vm.anchors"
REQUIRED = "scx_simple"
OPTIONAL = ("scx_qmap",)  # a failure to build one of these is a warning, not an error
CLANG = "clang-19"
LLVM_STRIP = "llvm-strip-19"
# Without it clang-19 merges scx_qmap's arena stores into a memset call, which BPF cannot make.
CLANG_FLAGS = ("-fno-builtin-memset",)
HOST_TOOLS = (CLANG, LLVM_STRIP, "make", "gcc", "pkg-config")
HOST_LIBS = ("libelf", "zlib")
HOST_PACKAGES = "clang-19 llvm-19 libelf-dev zlib1g-dev pkg-config make gcc"
# What of the source tree the build reads: the rest of the 1.5 GB tree is never unpacked.
KEEP = ("tools", "include", "scripts", "kernel/sched", "kernel/bpf", "arch/x86", "lib", "usr", "Makefile")
LOG_TAIL = 1500


def anchors_root() -> Path:
    return config.cache_dir() / "anchors"


def anchor_dir(info: kernel.KernelInfo) -> Path:
    return anchors_root() / info.release


def recipe(info: kernel.KernelInfo) -> dict[str, object]:
    """Everything that determines the binaries; its hash is the cache key (the source follows the kernel)."""
    return {
        "release": info.release,
        "version": info.version,
        "targets": [REQUIRED, *OPTIONAL],
        "clang": [CLANG, *CLANG_FLAGS],
        "llvm_strip": LLVM_STRIP,
        "keep": list(KEEP),
    }


def cache_key(info: kernel.KernelInfo) -> str:
    return hashlib.sha256(json.dumps(recipe(info), sort_keys=True).encode()).hexdigest()[:16]


def cached(info: kernel.KernelInfo) -> dict[str, Path] | None:
    """The binaries built for this kernel by the current recipe, or None."""
    d = anchor_dir(info)
    try:
        meta = json.loads((d / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("key") != cache_key(info):
        return None
    names = meta.get("built", [])
    built = {name: d / "bin" / name for name in (REQUIRED, *OPTIONAL) if name in names}
    return built if REQUIRED in built and all(p.is_file() for p in built.values()) else None


def build(kernel_version: str | None = None, force: bool = False) -> dict[str, Path]:
    """Return {name: path} of the example schedulers for the guest kernel, building them when needed.

    `kernel_version` is what `python -m tools.vm run --kernel` takes (None: the default kernel).
    scx_simple is always there; scx_qmap only where it built.
    """
    info = kernel.prepare(kernel_version)
    with config.cache_lock("anchors"):
        if not force and (built := cached(info)) is not None:
            log.info("anchors cached", release=info.release, built=sorted(built))
            return built
        check_host()
        return _build_locked(info)


def check_host() -> None:
    """The compilers and libraries the build needs, all from the host's own (bookworm) packages."""
    missing = [t for t in HOST_TOOLS if shutil.which(t) is None]
    if not missing:
        for lib in HOST_LIBS:
            if subprocess.run(["pkg-config", "--exists", lib], check=False).returncode != 0:
                missing.append(f"{lib} (pkg-config)")
    if missing:
        raise VMError(f"missing on the host for the anchor build: {', '.join(missing)}",
                      hint=f"apt-get install {HOST_PACKAGES}")


def _build_locked(info: kernel.KernelInfo) -> dict[str, Path]:
    anchors_root().mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(dir=anchors_root(), prefix=".build-") as tmp:
        work = Path(tmp)
        name, version = _download_source(info, work / "debs")
        tree = _unpack(next((work / "debs").glob("*.deb")), work)
        btf = _vmlinux_btf(info, work)
        built = _make(tree, btf, work)
        dest = anchor_dir(info)
        shutil.rmtree(dest, ignore_errors=True)
        (dest / "bin").mkdir(parents=True)
        for target, path in built.items():
            shutil.copy2(path, dest / "bin" / target)
        shutil.copy2(work / "build.log", dest / "build.log")
    meta = {"key": cache_key(info), "recipe": recipe(info), "source": f"{name}={version}",
            "built": sorted(built)}
    atomic_write_text(dest / "meta.json", json.dumps(meta, indent=2) + "\n")
    seconds = round(time.monotonic() - start)
    log.info("anchors ready", release=info.release, built=sorted(built), seconds=seconds)
    return {target: dest / "bin" / target for target in built}


def _source_version(apt: PrivateApt, name: str, info: kernel.KernelInfo) -> str:
    """The kernel's own source version; else the newest of its series (BTF CO-RE bridges the gap)."""
    try:
        versions = [s.get("Version", "") for s in apt.show(name)]
    except VMError:
        apt.update()  # the lists may predate this kernel's source package
        versions = [s.get("Version", "") for s in apt.show(name)]
    if info.version in versions:
        return info.version
    versions = sort_versions([v for v in versions if v])
    if not versions:
        raise VMError(f"no {name} in {', '.join(config.KERNEL_SUITES)}",
                      hint="the archive may have dropped this series: try another --kernel")
    log.warning("kernel's own source gone from the archive; using the series' newest",
                package=name, wanted=info.version, using=versions[0])
    return versions[0]


def _download_source(info: kernel.KernelInfo, dest: Path) -> tuple[str, str]:
    """Download linux-source-<series> through the harness's private apt (the host's is never touched)."""
    name = f"linux-source-{kernel.series(kernel.abi_of(info.release))}"
    apt = PrivateApt(config.cache_dir() / "apt")
    # the kernel lock: tools.vm.kernel updates the same private lists
    with config.cache_lock("kernel"):
        if not any((apt.root / "state" / "lists").glob("*_Packages*")):
            apt.update()
        version = _source_version(apt, name, info)
        log.info("fetching kernel source", package=name, version=version)
        try:
            apt.download([f"{name}={version}"], dest)
        except VMError:
            apt.update()
            apt.download([f"{name}={version}"], dest)
    return name, version


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise VMError(f"{what}: {exc}", hint=f"apt-get install {HOST_PACKAGES}") from None
    if proc.returncode != 0:
        raise VMError(f"{what} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-600:]}")


def _unpack(deb: Path, work: Path) -> Path:
    """The KEEP parts of the source tarball inside the .deb; returns the tree's top directory."""
    pkg = work / "pkg"
    _run(["dpkg-deb", "-x", str(deb), str(pkg)], f"dpkg-deb -x {deb.name}")
    tarballs = sorted((pkg / "usr" / "src").glob("linux-source-*.tar.*"))
    if not tarballs:
        raise VMError(f"{deb.name} holds no usr/src/linux-source-*.tar.*")
    src = work / "src"
    src.mkdir()
    log.info("unpacking kernel source", tarball=tarballs[0].name, keep=len(KEEP))
    # one directory level above KEEP: the tarball's own top directory, whatever it is called
    patterns = [f"*/{part}" for part in KEEP]
    _run(["tar", "-xf", str(tarballs[0]), "-C", str(src), "--wildcards", "--no-wildcards-match-slash",
          *patterns], f"tar -x {tarballs[0].name}")
    shutil.rmtree(pkg)
    tops = [d for d in src.iterdir() if d.is_dir()]
    if len(tops) != 1 or not (tops[0] / "tools" / "sched_ext" / "Makefile").is_file():
        raise VMError(f"{tarballs[0].name} has no tools/sched_ext/Makefile under one top directory")
    return tops[0]


def _vmlinux_btf(info: kernel.KernelInfo, work: Path) -> Path:
    """An ELF vmlinux of the guest kernel: its .BTF section is what vmlinux.h is generated from."""
    image = kernel.boot_image(info)
    with open(image, "rb") as f:
        if f.read(4) == b"\x7fELF":
            return image
    data = kernel.extract_vmlinux(image.read_bytes())
    if data is None:
        raise VMError(f"cannot extract vmlinux (for its BTF) from {image}",
                      hint="apt-get install zstd xz-utils gzip")
    out = work / "vmlinux"
    atomic_write_bytes(out, data)
    return out


def _make(tree: Path, btf: Path, work: Path) -> dict[str, Path]:
    """Build REQUIRED (a failure is an error) then OPTIONAL (a failure is a warning) in tools/sched_ext."""
    base = [
        "make", "-C", str(tree / "tools" / "sched_ext"), f"-j{os.cpu_count() or 1}",
        f"CLANG={' '.join([CLANG, *CLANG_FLAGS])}", f"LLVM_STRIP={LLVM_STRIP}", f"VMLINUX_BTF={btf}",
    ]  # fmt: skip
    bindir = tree / "tools" / "sched_ext" / "build" / "bin"
    built: dict[str, Path] = {}
    with open(work / "build.log", "w") as logf:
        for target in (REQUIRED, *OPTIONAL):
            log.info("building", target=target)
            logf.write(f"$ {' '.join(base)} {target}\n")
            logf.flush()
            proc = subprocess.run([*base, target], stdout=logf, stderr=subprocess.STDOUT, check=False)
            if proc.returncode == 0 and (bindir / target).is_file():
                built[target] = bindir / target
                continue
            tail = (work / "build.log").read_text(errors="replace")[-LOG_TAIL:]
            if target == REQUIRED:
                keep = anchors_root() / "failed-build.log"
                shutil.copy2(work / "build.log", keep)
                raise VMError(f"make {target} failed ({proc.returncode}): {tail.strip()[-600:]}",
                              hint=f"the whole output is in {keep}")
            log.warning("optional anchor did not build", target=target, rc=proc.returncode)
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.vm.anchors",
        description="Build (or reuse) the kernel's example sched_ext schedulers for the guest kernel "
        "and print their paths as JSON.",
    )
    parser.add_argument("--kernel", "-V", dest="kernel_version", metavar="VERSION",
                        help="Guest kernel, as tools.vm run --kernel takes it (default: the default kernel).")
    parser.add_argument("--force", action="store_true", help="Rebuild even if cached.")
    parser.add_argument("--quiet", "-q", action="store_true", help="Only warnings and errors on stderr.")
    args = parser.parse_args(argv)
    clikit.configure_logging(args.quiet)
    try:
        built = build(args.kernel_version, force=args.force)
    except VMError as exc:
        report_error(exc, PROG)
        return int(exc.code)
    sys.stdout.write(json.dumps({name: str(path) for name, path in built.items()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
