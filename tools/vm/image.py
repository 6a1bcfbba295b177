"""`python -m tools.vm image`: the guest's base root filesystem, built once and cached.

debootstrap (minbase) of Debian trixie plus the packages below, a few baked harness files
(guest/scxvm-boot, the systemd unit, the scxctl launcher), written into a raw disk with an MBR
partition table (so the kernel finds root by PARTUUID whatever order the NVMe drives probe in) and
an ext4 file system made by `mkfs.ext4 -d`. The project itself is never baked in: each run brings the
working tree on its own disk. Cached under a key hashed from the package list and the recipe.

Two flavours, each cached on its own (a build of one never evicts the other):
  default    scxctl's dependencies pre-installed, and the working tree on every run through a
             development overlay (/opt/scxctl on sys.path by a .pth, a launcher in /usr/local/bin)
  installed  the same system without python3, scxctl's dependencies, the .pth or the launcher: the
             package tests install the .deb and its dependencies from a local repository, so a
             wrong Depends or a file the package forgot fails there instead of being hidden
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

# The installed flavour: what the package tests need besides the package (stress-ng loads the
# scheduler, sudo/passwd for the group checks), nothing that scxctl.deb should bring itself.
INSTALLED_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "stress-ng",
    "procps",
    "util-linux",
    "iproute2",
    "kmod",
    "sudo",
    "passwd",
)
# The development flavour adds scxctl's dependencies and the tools the tests use on the working tree.
PACKAGES = (
    *INSTALLED_PACKAGES,
    "python3",
    "libbpf1",
    "bpftool",
    "python3-typer",
    "python3-structlog",
    "python3-platformdirs",
    "python3-rich",
    "python3-bpfcc",
    "python3-pytest",
    "rt-tests",  # hackbench and cyclictest: the loads schedulers are compared on (bench workload)
)

DEFAULT = "default"
INSTALLED = "installed"
FLAVOURS = (DEFAULT, INSTALLED)

GUEST_DIR = Path(__file__).resolve().parent / "guest"
# baked file (in guest/) -> path in the image, mode
BAKED = {
    "scxvm-boot": ("usr/local/sbin/scxvm-boot", 0o755),
    "scxvm-run.service": ("etc/systemd/system/scxvm-run.service", 0o644),
    "scxctl-launcher": ("usr/local/bin/scxctl", 0o755),
}
CUSTOMIZE = "customize.sh"
# Runs after CUSTOMIZE in the installed flavour: takes the development overlay's pieces out again.
CUSTOMIZE_INSTALLED = "customize-installed.sh"
LAUNCHER = "scxctl-launcher"  # the overlay's /usr/local/bin/scxctl: never in the installed flavour

DISK_ID = "5c7c7e11"  # MBR disk signature: the root partition is PARTUUID=5c7c7e11-01
ROOT_PARTUUID = f"{DISK_ID}-01"
PART_OFFSET = 1024 * 1024
FS_HEADROOM = 1536 * 1024 * 1024  # free space in the guest root fs (runs write to a snapshot of it)


def check_flavour(flavour: str) -> str:
    if flavour not in FLAVOURS:
        raise VMError(f"unknown image flavour {flavour!r} (one of: {', '.join(FLAVOURS)})")
    return flavour


def packages(flavour: str = DEFAULT) -> tuple[str, ...]:
    return PACKAGES if check_flavour(flavour) == DEFAULT else INSTALLED_PACKAGES


def baked(flavour: str = DEFAULT) -> dict[str, tuple[str, int]]:
    if check_flavour(flavour) == DEFAULT:
        return BAKED
    return {name: where for name, where in BAKED.items() if name != LAUNCHER}


def customize_script(flavour: str = DEFAULT) -> str:
    """The shell text run in the chroot after the packages are installed.

    customize.sh writes the overlay's .pth unconditionally; the installed flavour gives it the
    directory to write into and removes the file afterwards, so that the default flavour's script,
    and with it the default image's cache key, stay exactly as they were.
    """
    text = (GUEST_DIR / CUSTOMIZE).read_text()
    if check_flavour(flavour) == DEFAULT:
        return text
    return "mkdir -p /usr/lib/python3/dist-packages\n" + text + (GUEST_DIR / CUSTOMIZE_INSTALLED).read_text()


def recipe(flavour: str = DEFAULT) -> dict[str, object]:
    """Everything that determines the image's content; its hash is the cache key."""
    bake = baked(flavour)
    scripts = [CUSTOMIZE] if flavour == DEFAULT else [CUSTOMIZE, CUSTOMIZE_INSTALLED]
    files = {name: (GUEST_DIR / name).read_text() for name in [*bake, *scripts]}
    rec: dict[str, object] = {
        "suite": config.SUITE,
        "mirror": config.MIRROR,
        "variant": "minbase",
        "packages": sorted(packages(flavour)),
        "baked": {name: [dst, mode] for name, (dst, mode) in bake.items()},
        "files": files,
        "partuuid": ROOT_PARTUUID,
        "layout": "mbr+ext4@1MiB",
    }
    if flavour != DEFAULT:  # the default recipe has no such key: its cache key must not move
        rec["flavour"] = flavour
    return rec


def cache_key(rec: dict[str, object] | None = None) -> str:
    blob = json.dumps(rec if rec is not None else recipe(), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def image_root(flavour: str = DEFAULT) -> Path:
    """Each flavour under its own directory: a build evicts older images of its own flavour only."""
    name = "image" if check_flavour(flavour) == DEFAULT else f"image-{flavour}"
    return config.cache_dir() / name


def image_path(key: str | None = None, flavour: str = DEFAULT) -> Path:
    return image_root(flavour) / (key or cache_key(recipe(flavour))) / "rootfs.img"


def current(flavour: str = DEFAULT) -> Path | None:
    """The cached image for the flavour's current recipe, or None."""
    p = image_path(flavour=flavour)
    return p if p.is_file() and (p.parent / "meta.json").is_file() else None


def run_step(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    """One set-up step; a failure raises VMError with the tail of its output (tools.deb uses it too)."""
    log.info(what, cmd=" ".join(cmd[:3]))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    except FileNotFoundError as exc:
        raise VMError(f"{what}: {exc}", hint="run scripts/install.sh") from None
    if proc.returncode != 0:
        raise VMError(f"{what} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-600:]}")


def mounted_under(root: Path) -> list[str]:
    """Mount points below `root`: what a tree removal must never descend into."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(prefix)]


@contextlib.contextmanager
def chroot_mounts(root: Path) -> Iterator[None]:
    """/proc in the chroot for maintainer scripts; always unmounted, even on failure."""
    run_step(["mount", "-t", "proc", "proc", str(root / "proc")], "mount /proc in the chroot")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(root / "proc")], check=False)


def remove_tree(root: Path) -> None:
    """rm -rf of a build tree, refused while anything is still mounted below it."""
    left = mounted_under(root)
    if left:  # never rm -rf through a mount into the host
        raise VMError(f"refusing to delete {root}: still mounted: {', '.join(left)}")
    shutil.rmtree(root, ignore_errors=True)


def debootstrap(root: Path, debs: Path) -> None:
    """Minbase trixie into `root`, the downloaded .debs kept in `debs` for the next run."""
    debs.mkdir(parents=True, exist_ok=True)
    run_step(
        [
            "debootstrap", "--variant=minbase", f"--keyring={config.KEYRING}", "--components=main",
            f"--cache-dir={debs}", config.SUITE, str(root), config.MIRROR,
        ],
        "debootstrap trixie (minbase)",
    )  # fmt: skip


def _install(root: Path, flavour: str) -> None:
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LANG": "C.UTF-8",
        "HOME": "/root",
    }
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")  # no service starts inside the chroot
    policy.chmod(0o755)
    with chroot_mounts(root):
        run_step(["chroot", str(root), "apt-get", "-q", "update"], "apt-get update (guest)", env)
        run_step(
            ["chroot", str(root), "apt-get", "-q", "-y", "--no-install-recommends",
             "-o", "Dpkg::Options::=--force-unsafe-io", "install", *packages(flavour)],
            "apt-get install (guest packages)",
            env,
        )
        for name, (dst, mode) in baked(flavour).items():
            target = root / dst
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(GUEST_DIR / name, target)
            target.chmod(mode)
        run_step(["chroot", str(root), "/bin/bash", "-c", customize_script(flavour)], "customize", env)
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
    run_step(
        [
            "mkfs.ext4", "-q", "-F", "-L", label, "-E", f"offset={PART_OFFSET}", "-d", str(root),
            str(img), f"{fs_bytes // 1024}k",
        ],
        "mkfs.ext4 -d (root image)",
    )  # fmt: skip


def build(force: bool = False, flavour: str = DEFAULT) -> Path:
    """Return the cached image for the flavour's current recipe, building it first when needed."""
    check_flavour(flavour)
    if os.geteuid() != 0:
        raise VMError("building the guest image needs root (debootstrap, chroot)", hint="run as root")
    # one lock for both flavours: their debootstraps share the .deb cache directory
    with config.cache_lock("image"):
        return _build_locked(force, flavour)


def _build_locked(force: bool, flavour: str) -> Path:
    rec = recipe(flavour)
    key = cache_key(rec)
    dest = image_path(key, flavour)
    if not force and current(flavour) == dest:
        log.info("image cached", path=str(dest), flavour=flavour)
        return dest
    image_root(flavour).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=image_root(flavour), prefix=".build-"))
    try:
        root = work / "root"
        debootstrap(root, config.cache_dir() / "debs")
        _install(root, flavour)
        img = work / "rootfs.img"
        make_disk(root, img, _du_bytes(root) + FS_HEADROOM)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(img, dest)
        atomic_write_text(dest.parent / "meta.json", json.dumps({"key": key, "recipe": rec}, indent=2) + "\n")
    finally:
        remove_tree(work)
    for old in image_root(flavour).iterdir():  # keep only the current recipe's image
        if old.is_dir() and old.name != key and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    log.info("image ready", path=str(dest), flavour=flavour, size_mb=dest.stat().st_size // 2**20)
    return dest
