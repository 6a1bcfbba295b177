"""`python -m tools.vm kernel`: fetch and cache a Debian kernel that has sched_ext built in.

Takes the newest trixie(-backports) `linux-image-<abi>-cloud-amd64`, downloads it together with its
split-out `linux-binary-<abi>` (vmlinuz) and `linux-base-<abi>` (config, modules.builtin) packages,
unpacks them with dpkg-deb -x and keeps it only if the config really says CONFIG_SCHED_CLASS_EXT=y
and has everything the guest boots from built in (no modules are ever loaded in the guest).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from scxctl.doctor.checks_kernel import parse_kconfig
from scxctl.fsutil import atomic_write_bytes, atomic_write_text
from scxctl.log import get_logger
from tools.vm import config
from tools.vm.apt import PrivateApt, sort_versions
from tools.vm.codes import VMError

log = get_logger("tools.vm.kernel")

# Options the guest cannot do without: sched_ext itself, BTF for BPF CO-RE, and the built-in
# drivers for the NVMe root disk, ext4, the partition table and the virtio output channel.
REQUIRED_CONFIG = (
    "CONFIG_SCHED_CLASS_EXT",
    "CONFIG_DEBUG_INFO_BTF",
    "CONFIG_BPF_SYSCALL",
    "CONFIG_EXT4_FS",
    "CONFIG_BLK_DEV_NVME",
    "CONFIG_MSDOS_PARTITION",
    "CONFIG_VIRTIO_PCI",
    "CONFIG_VIRTIO_CONSOLE",
    "CONFIG_SERIAL_8250_CONSOLE",
    "CONFIG_DEVTMPFS",
)
MAX_CANDIDATES = 4

_IMAGE_RE = re.compile(rf"^linux-image-(?P<abi>\d[0-9A-Za-z.+~]*)-{config.KERNEL_FLAVOUR}$")


@dataclass(frozen=True)
class KernelInfo:
    release: str  # `uname -r` in the guest, e.g. 7.3.4+deb13-cloud-amd64
    version: str  # Debian package version
    package: str

    def dir(self, root: Path) -> Path:
        return root / self.release


@dataclass(frozen=True)
class Candidate:
    package: str
    version: str
    depends: str

    @property
    def abi(self) -> str:
        m = _IMAGE_RE.match(self.package)
        assert m is not None
        return m["abi"]

    def split_packages(self) -> list[str]:
        """The linux-binary-/linux-base- packages this image depends on (newer split packaging)."""
        names = [alt.strip().split(" ")[0] for dep in self.depends.split(",") for alt in dep.split("|")]
        wanted = tuple(f"linux-{kind}-{self.abi}-{config.KERNEL_FLAVOUR}" for kind in ("binary", "base"))
        return [n for n in names if n in wanted]


def missing_options(opts: dict[str, str]) -> list[str]:
    return [o for o in REQUIRED_CONFIG if opts.get(o) != "y"]


def kernel_root() -> Path:
    return config.cache_dir() / "kernel"


def current() -> KernelInfo | None:
    """The cached kernel, or None when none is prepared (or its files are gone)."""
    meta = kernel_root() / "current.json"
    try:
        info = KernelInfo(**json.loads(meta.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    d = info.dir(kernel_root())
    return info if (d / "vmlinuz").is_file() and (d / "config").is_file() else None


def vmlinuz(info: KernelInfo) -> Path:
    return info.dir(kernel_root()) / "vmlinuz"


# compressed payload magic -> decompressor reading stdin (extract-vmlinux's list, the ones Debian uses)
_PAYLOADS = (
    (b"\x28\xb5\x2f\xfd", ["zstd", "-dcq"]),
    (b"\xfd7zXZ\x00", ["xz", "-dcq"]),
    (b"\x1f\x8b\x08", ["gzip", "-dcq"]),
)


def extract_vmlinux(bzimage: bytes) -> bytes | None:
    """The uncompressed ELF kernel inside a bzImage, or None if no known payload decompresses."""
    for magic, cmd in _PAYLOADS:
        start = bzimage.find(magic)
        while start != -1:
            try:
                proc = subprocess.run(cmd, input=bzimage[start:], capture_output=True, check=False)
            except FileNotFoundError:
                break
            if proc.stdout[:4] == b"\x7fELF":  # trailing data after the payload makes rc != 0
                return proc.stdout
            start = bzimage.find(magic, start + 1)
    return None


def boot_image(info: KernelInfo) -> Path:
    """What QEMU's -kernel gets: the uncompressed ELF (PVH entry) when the kernel supports it.

    A PVH boot skips the in-guest decompression of the bzImage, which under TCG costs 10-20 s.
    """
    d = info.dir(kernel_root())
    elf = d / "vmlinux"
    if elf.is_file():
        return elf
    if parse_kconfig((d / "config").read_text()).get("CONFIG_PVH") == "y":
        data = extract_vmlinux((d / "vmlinuz").read_bytes())
        if data is not None:
            atomic_write_bytes(elf, data)
            return elf
        log.warning("cannot extract vmlinux from the bzImage; booting the compressed kernel")
    return d / "vmlinuz"


def lib_modules_dir(info: KernelInfo) -> Path:
    """config, System.map, modules.builtin...: installed as /lib/modules/<release>/ in the guest."""
    return info.dir(kernel_root()) / "lib-modules"


def candidates(apt: PrivateApt) -> list[Candidate]:
    names = [n for n in apt.pkgnames("linux-image-") if _IMAGE_RE.match(n)]
    if not names:
        return []
    found = [Candidate(s["Package"], s.get("Version", ""), s.get("Depends", "")) for s in apt.show(*names)]
    order = sort_versions([c.version for c in found])
    return sorted(found, key=lambda c: order.index(c.version))


def _extract(debs: list[Path], dest: Path) -> None:
    for deb in debs:
        cmd = ["dpkg-deb", "-x", str(deb), str(dest)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise VMError(f"dpkg-deb -x {deb.name} failed: {proc.stderr.strip()}")


def _find_one(root: Path, patterns: tuple[str, ...]) -> Path | None:
    for pat in patterns:
        hits = sorted(root.glob(pat))
        if hits:
            return hits[0]
    return None


def _try(apt: PrivateApt, cand: Candidate, work: Path) -> KernelInfo | None:
    """Download and unpack one candidate; install it into the cache if its config qualifies."""
    specs = [f"{p}={cand.version}" for p in [cand.package, *cand.split_packages()]]
    debs = apt.download(specs, work / "debs")
    unpacked = work / "root"
    _extract(debs, unpacked)
    cfg = _find_one(unpacked, ("usr/lib/modules/*/config", "lib/modules/*/config", "boot/config-*"))
    image = _find_one(unpacked, ("usr/lib/modules/*/vmlinuz", "lib/modules/*/vmlinuz", "boot/vmlinuz-*"))
    if cfg is None or image is None:
        log.warning("kernel package without config or vmlinuz", package=cand.package)
        return None
    missing = missing_options(parse_kconfig(cfg.read_text()))
    if missing:
        log.info("kernel rejected", package=cand.package, version=cand.version, missing=missing)
        return None
    release = cfg.parent.name if cfg.name == "config" else cfg.name.removeprefix("config-")
    info = KernelInfo(release=release, version=cand.version, package=cand.package)
    dest = info.dir(kernel_root())
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "lib-modules").mkdir(parents=True)
    shutil.copy2(image, dest / "vmlinuz")
    shutil.copy2(cfg, dest / "config")
    mods = cfg.parent if cfg.name == "config" else None
    if mods is not None:
        for f in mods.iterdir():
            if f.is_file() and f.name != "vmlinuz":
                shutil.copy2(f, dest / "lib-modules" / f.name)
    else:
        shutil.copy2(cfg, dest / "lib-modules" / "config")
    return info


def prepare(refresh: bool = False) -> KernelInfo:
    """Return the cached kernel, fetching the newest qualifying one when absent (or asked to)."""
    with config.cache_lock("kernel"):
        if not refresh and (info := current()) is not None:
            log.info("kernel cached", release=info.release, version=info.version)
            return info
        return _fetch()


def _fetch() -> KernelInfo:
    apt = PrivateApt(config.cache_dir() / "apt")
    apt.update()
    cands = candidates(apt)
    if not cands:
        raise VMError(f"no linux-image-*-{config.KERNEL_FLAVOUR} package found in {config.KERNEL_SUITES}")
    kernel_root().mkdir(parents=True, exist_ok=True)
    for cand in cands[:MAX_CANDIDATES]:
        log.info("trying kernel", package=cand.package, version=cand.version)
        with tempfile.TemporaryDirectory(dir=kernel_root(), prefix=".work-") as tmp:
            info = _try(apt, cand, Path(tmp))
        if info is not None:
            boot_image(info)  # extract the PVH-bootable vmlinux now, not during the first run
            atomic_write_text(kernel_root() / "current.json", json.dumps(asdict(info), indent=2) + "\n")
            log.info("kernel ready", release=info.release, version=info.version)
            return info
    raise VMError(
        f"none of the {min(len(cands), MAX_CANDIDATES)} newest {config.KERNEL_FLAVOUR} kernels has "
        f"{', '.join(REQUIRED_CONFIG)} built in"
    )


