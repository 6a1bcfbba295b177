"""`python -m tools.vm image`: the guest's base root filesystem, built once and cached.

debootstrap (minbase) of Debian trixie plus the packages below, a few baked harness files
(guest/scxvm-boot, the systemd unit, the scxctl launcher), written into a raw disk with an MBR
partition table (so the kernel finds root by PARTUUID whatever order the NVMe drives probe in) and
an ext4 file system made by `mkfs.ext4 -d`. The project itself is never baked in: each run brings the
working tree on its own disk. Cached under a key hashed from the package list and the recipe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from scxctl.fsutil import atomic_write_text
from scxctl.log import get_logger
from tools.vm import config
from tools.vm.codes import VMError

log = get_logger("tools.vm.image")

PACKAGES = (
    "python3",
    "systemd",
    "systemd-sysv",
    "dbus",
    "libbpf1",
    "bpftool",
    "python3-typer",
    "python3-structlog",
    "python3-platformdirs",
    "python3-rich",
    "python3-bpfcc",
    "python3-pytest",
    "stress-ng",
    "procps",
    "util-linux",
    "iproute2",
    "kmod",
    "sudo",
    "passwd",
)

GUEST_DIR = Path(__file__).resolve().parent / "guest"
# baked file (in guest/) -> path in the image, mode
BAKED = {
    "scxvm-boot": ("usr/local/sbin/scxvm-boot", 0o755),
    "scxvm-run.service": ("etc/systemd/system/scxvm-run.service", 0o644),
    "scxctl-launcher": ("usr/local/bin/scxctl", 0o755),
}
CUSTOMIZE = "customize.sh"

DISK_ID = "5c7c7e11"  # MBR disk signature: the root partition is PARTUUID=5c7c7e11-01
ROOT_PARTUUID = f"{DISK_ID}-01"
PART_OFFSET = 1024 * 1024
FS_HEADROOM = 1536 * 1024 * 1024  # free space in the guest root fs (runs write to a snapshot of it)


def recipe() -> dict[str, object]:
    """Everything that determines the image's content; its hash is the cache key."""
    files = {name: (GUEST_DIR / name).read_text() for name in [*BAKED, CUSTOMIZE]}
    return {
        "suite": config.SUITE,
        "mirror": config.MIRROR,
        "variant": "minbase",
        "packages": sorted(PACKAGES),
        "baked": {name: [dst, mode] for name, (dst, mode) in BAKED.items()},
        "files": files,
        "partuuid": ROOT_PARTUUID,
        "layout": "mbr+ext4@1MiB",
    }


def cache_key(rec: dict[str, object] | None = None) -> str:
    blob = json.dumps(rec if rec is not None else recipe(), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def image_root() -> Path:
    return config.cache_dir() / "image"


def image_path(key: str | None = None) -> Path:
    return image_root() / (key or cache_key()) / "rootfs.img"


def current() -> Path | None:
    """The cached image for the current recipe, or None."""
    p = image_path()
    return p if p.is_file() and (p.parent / "meta.json").is_file() else None


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    log.info(what, cmd=" ".join(cmd[:3]))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    except FileNotFoundError as exc:
        raise VMError(f"{what}: {exc}", hint="run scripts/install.sh") from None
    if proc.returncode != 0:
        raise VMError(f"{what} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-600:]}")


def _mounted_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(prefix)]


@contextlib.contextmanager
def _chroot_mounts(root: Path) -> Iterator[None]:
    """/proc in the chroot for maintainer scripts; always unmounted, even on failure."""
    _run(["mount", "-t", "proc", "proc", str(root / "proc")], "mount /proc in the chroot")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(root / "proc")], check=False)


def _remove_tree(root: Path) -> None:
    left = _mounted_under(root)
    if left:  # never rm -rf through a mount into the host
        raise VMError(f"refusing to delete {root}: still mounted: {', '.join(left)}")
    shutil.rmtree(root, ignore_errors=True)


def _debootstrap(root: Path, debs: Path) -> None:
    debs.mkdir(parents=True, exist_ok=True)
    _run(
        [
            "debootstrap", "--variant=minbase", f"--keyring={config.KEYRING}", "--components=main",
            f"--cache-dir={debs}", config.SUITE, str(root), config.MIRROR,
        ],
        "debootstrap trixie (minbase)",
    )  # fmt: skip


def _install(root: Path) -> None:
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LANG": "C.UTF-8",
        "HOME": "/root",
    }
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")  # no service starts inside the chroot
    policy.chmod(0o755)
    with _chroot_mounts(root):
        _run(["chroot", str(root), "apt-get", "-q", "update"], "apt-get update (guest)", env)
        _run(
            ["chroot", str(root), "apt-get", "-q", "-y", "--no-install-recommends",
             "-o", "Dpkg::Options::=--force-unsafe-io", "install", *PACKAGES],
            "apt-get install (guest packages)",
            env,
        )
        for name, (dst, mode) in BAKED.items():
            target = root / dst
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(GUEST_DIR / name, target)
            target.chmod(mode)
        _run(["chroot", str(root), "/bin/bash", "-c", (GUEST_DIR / CUSTOMIZE).read_text()], "customize", env)
    policy.unlink()


def _du_bytes(root: Path) -> int:
    out = subprocess.run(["du", "-sxb", str(root)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def mbr(disk_id: str, start_sector: int, sectors: int) -> bytes:
    """A DOS partition table with one Linux partition (the kernel's PARTUUID is <disk_id>-01)."""
    sector = bytearray(512)
    sector[0x1B8:0x1BC] = int(disk_id, 16).to_bytes(4, "little")
    entry = bytes([0x00, 0xFE, 0xFF, 0xFF, 0x83, 0xFE, 0xFF, 0xFF])
    entry += start_sector.to_bytes(4, "little") + sectors.to_bytes(4, "little")
    sector[0x1BE:0x1CE] = entry
    sector[0x1FE:0x200] = b"\x55\xaa"
    return bytes(sector)


def make_disk(root: Path, img: Path, fs_bytes: int, label: str = "scxvm-root") -> None:
    """Raw disk: MBR with one Linux partition at 1 MiB holding an ext4 made from `root`."""
    fs_bytes = (fs_bytes // (4 * 1024 * 1024) + 1) * 4 * 1024 * 1024
    with open(img, "wb") as f:
        f.truncate(PART_OFFSET + fs_bytes)
        f.write(mbr(DISK_ID, PART_OFFSET // 512, fs_bytes // 512))
    _run(
        [
            "mkfs.ext4", "-q", "-F", "-L", label, "-E", f"offset={PART_OFFSET}", "-d", str(root),
            str(img), f"{fs_bytes // 1024}k",
        ],
        "mkfs.ext4 -d (root image)",
    )  # fmt: skip


def build(force: bool = False) -> Path:
    """Return the cached image for the current recipe, building it first when needed."""
    if os.geteuid() != 0:
        raise VMError("building the guest image needs root (debootstrap, chroot)", hint="run as root")
    with config.cache_lock("image"):
        return _build_locked(force)


def _build_locked(force: bool) -> Path:
    rec = recipe()
    key = cache_key(rec)
    dest = image_path(key)
    if not force and current() == dest:
        log.info("image cached", path=str(dest))
        return dest
    image_root().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=image_root(), prefix=".build-"))
    try:
        root = work / "root"
        _debootstrap(root, config.cache_dir() / "debs")
        _install(root)
        img = work / "rootfs.img"
        make_disk(root, img, _du_bytes(root) + FS_HEADROOM)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(img, dest)
        atomic_write_text(dest.parent / "meta.json", json.dumps({"key": key, "recipe": rec}, indent=2) + "\n")
    finally:
        _remove_tree(work)
    for old in image_root().iterdir():  # keep only the current recipe's image
        if old.is_dir() and old.name != key and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    log.info("image ready", path=str(dest), size_mb=dest.stat().st_size // 2**20)
    return dest
