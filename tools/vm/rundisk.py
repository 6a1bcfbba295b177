"""The per-run disk: the working tree, --copy files, the command(s) and the guest script.

Built fresh for every run with `mkfs.ext4 -d` from a staging directory and attached as a second
NVMe drive (label scxvm-run). The guest writes /results and its exit code onto it; after QEMU
exits they are read back with e2fsck + debugfs, without mounting anything on the host.

A run with a second command (`then`) keeps the same run disk for both boots: `cmd` runs on the
first, `then` on the second, and /results collects what both wrote.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tools.vm import config
from tools.vm.codes import VMError

LABEL = "scxvm-run"
GUEST_SCRIPT = Path(__file__).resolve().parent / "guest" / "guest.sh"
# what of the working tree goes into the guest's /opt/scxctl (bpf/ and native/ with their build/)
PROJECT_ITEMS = (
    "scxctl", "bpf", "native", "tests", "benchmarks", "packaging", "examples", "docs", "pyproject.toml",
    "README.md",
)
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", "*.egg-info")
RESULTS_SPACE = 1024 * 1024 * 1024  # free space for /results (the image file is sparse)

# light mode only (systemd mounts these itself); X-mount.mkdir creates missing mount points
FSTAB_LIGHT = """\
tmpfs /run tmpfs mode=755,nosuid,nodev 0 0
tmpfs /tmp tmpfs mode=1777,nosuid,nodev 0 0
devpts /dev/pts devpts gid=5,mode=620,X-mount.mkdir 0 0
tmpfs /dev/shm tmpfs mode=1777,nosuid,nodev,X-mount.mkdir 0 0
cgroup2 /sys/fs/cgroup cgroup2 nsdelegate 0 0
bpf /sys/fs/bpf bpf mode=700 0 0
debugfs /sys/kernel/debug debugfs defaults 0 0
tracefs /sys/kernel/tracing tracefs defaults 0 0
"""


def fstab_run(
    release: str | None, project: bool = True, headers: tuple[str, ...] = (), second: str | None = None
) -> str:
    """Bind mounts of the run disk's parts to where the guest expects them (both modes).

    `project` False (the installed flavour): no /opt/scxctl, so nothing of the working tree is
    visible in the guest besides what --copy brings. `headers`: directories of the unpacked
    kernel headers (`usr/src/linux-headers-...`, `usr/lib/linux-kbuild-...`), each bound to the same
    path in the guest, where the packages would have put them. `second`: the release of the second
    boot's kernel, when it is another one (its modules are on the run disk as kernel2).
    """
    lines = ["/mnt/scxvm/project /opt/scxctl none bind,X-mount.mkdir 0 0"] if project else []
    lines.append("/mnt/scxvm/results /results none bind,X-mount.mkdir 0 0")
    if release is not None:
        lines.append(f"/mnt/scxvm/kernel /lib/modules/{release} none bind,X-mount.mkdir 0 0")
    if second is not None:
        lines.append(f"/mnt/scxvm/kernel2 /lib/modules/{second} none bind,X-mount.mkdir 0 0")
    lines += [f"/mnt/scxvm/headers/{d} /{d} none bind,X-mount.mkdir 0 0" for d in headers]
    return "\n".join(lines) + "\n"


def header_dirs(headers: Path) -> tuple[str, ...]:
    """The top directories of an unpacked headers tree that the guest needs, relative to it."""
    found = [*sorted((headers / "usr" / "src").glob("*")),
             *sorted((headers / "usr" / "lib").glob("linux-kbuild-*"))]
    return tuple(str(p.relative_to(headers)) for p in found if p.is_dir())


def _stage_headers(headers: Path, staging: Path, release: str) -> tuple[str, ...]:
    """Hard links of the cached headers (no copy: the cache and the run dirs share a file system),
    and /lib/modules/RELEASE/build and source pointing at them, as linux-headers-RELEASE installs."""
    try:
        shutil.copytree(headers, staging / "headers", symlinks=True, copy_function=os.link)
    except (OSError, shutil.Error):
        shutil.rmtree(staging / "headers", ignore_errors=True)
        shutil.copytree(headers, staging / "headers", symlinks=True)
    dirs = header_dirs(headers)
    mods = staging / "kernel"
    for name, target in (("build", f"linux-headers-{release}"), ("source", None)):
        if target is None:
            common = [d for d in dirs if d.startswith("usr/src/") and d.endswith("-common")]
            if not common:
                continue
            target = common[0].removeprefix("usr/src/")
        (mods / name).unlink(missing_ok=True)
        (mods / name).symlink_to(f"/usr/src/{target}")
    return dirs


@dataclass(frozen=True)
class Copy:
    src: Path
    dst: str  # absolute path in the guest

    @classmethod
    def parse(cls, spec: str) -> Copy:
        """`SRC:DST`: SRC a host file or directory, DST an absolute guest path."""
        src, sep, dst = spec.partition(":")
        if not sep or not src or not dst:
            raise ValueError(f"--copy wants SRC:DST, got {spec!r}")
        if not dst.startswith("/"):
            raise ValueError(f"--copy destination must be an absolute guest path, got {dst!r}")
        if "\t" in dst or "\n" in dst:
            raise ValueError(f"--copy destination contains a tab or newline: {dst!r}")
        return cls(Path(src), dst)


def stage(
    staging: Path,
    command: str,
    copies: list[Copy],
    lib_modules: Path | None,
    release: str | None = None,
    checkout: Path = config.CHECKOUT,
    *,
    then: str | None = None,
    project: bool = True,
    headers: Path | None = None,
    second_kernel: tuple[Path, str] | None = None,
) -> str:
    """Fill `staging` with what the run disk holds; returns the run's nonce.

    `then`: the command of the second boot (guest.sh runs it once the root disk carries the
    first boot's marker). `project` False leaves the working tree off the disk (installed flavour).
    `headers`: the kernel's unpacked headers (tools.vm.kernel.prepare_headers), for bcc in the guest.
    `second_kernel`: (lib/modules dir, release) of another kernel the second boot runs.
    """
    staging.mkdir(parents=True, exist_ok=True)
    nonce = secrets.token_hex(8)
    (staging / "nonce").write_text(nonce + "\n")
    (staging / "cmd").write_text(command)
    if then is not None:
        (staging / "then").write_text(then)
    shutil.copyfile(GUEST_SCRIPT, staging / "guest.sh")
    if project:
        tree = staging / "project"
        tree.mkdir()
        for item in PROJECT_ITEMS:
            src = checkout / item
            if src.is_dir():
                shutil.copytree(src, tree / item, ignore=_IGNORE, symlinks=True)
            elif src.is_file():
                shutil.copy2(src, tree / item)
    if lib_modules is not None:
        shutil.copytree(lib_modules, staging / "kernel")
    if second_kernel is not None:
        shutil.copytree(second_kernel[0], staging / "kernel2")
    dirs: tuple[str, ...] = ()
    if headers is not None and lib_modules is not None and release is not None:
        dirs = _stage_headers(headers, staging, release)
    (staging / "fstab.light").write_text(FSTAB_LIGHT)
    (staging / "fstab.run").write_text(fstab_run(release if lib_modules is not None else None, project, dirs,
                                                 second_kernel[1] if second_kernel is not None else None))
    lines = []
    for i, c in enumerate(copies):
        if not c.src.exists():
            raise VMError(f"--copy source does not exist: {c.src}")
        dest = staging / "copies" / str(i)
        dest.parent.mkdir(exist_ok=True)
        if c.src.is_dir():
            shutil.copytree(c.src, dest, symlinks=True)
        else:
            shutil.copy2(c.src, dest)
        lines.append(f"{i}\t{c.dst}\n")
    (staging / "copies.tsv").write_text("".join(lines))
    (staging / "results").mkdir()
    (staging / "results").chmod(0o1777)  # the unprivileged `tester` may write results too
    return nonce


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def make(staging: Path, img: Path) -> None:
    size = _tree_bytes(staging) * 2 + RESULTS_SPACE
    size = (size // (4 * 1024 * 1024) + 1) * 4 * 1024 * 1024
    with open(img, "wb") as f:
        f.truncate(size)
    proc = subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-L", LABEL, "-d", str(staging), str(img)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise VMError(f"mkfs.ext4 (run disk) failed: {proc.stderr.strip()}")


def _fsck(img: Path) -> None:
    """Replay the journal if the guest did not unmount cleanly; debugfs does not replay it."""
    subprocess.run(["e2fsck", "-fy", str(img)], capture_output=True, check=False)


def read_exitcode(img: Path) -> int | None:
    _fsck(img)
    cmd = ["debugfs", "-R", "cat /exitcode", str(img)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        return int(proc.stdout.strip())
    except ValueError:
        return None


def fetch_results(img: Path, dest: Path, scratch: Path) -> None:
    """Copy the guest's /results (the run disk's results/) into `dest`."""
    _fsck(img)
    scratch.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["debugfs", "-R", f"rdump /results {scratch}", str(img)], capture_output=True, text=True, check=False
    )
    got = scratch / "results"
    if proc.returncode != 0 or not got.is_dir():
        raise VMError(f"cannot read /results back from the run disk: {proc.stderr.strip()[-300:]}")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(got, dest, dirs_exist_ok=True, symlinks=True)
