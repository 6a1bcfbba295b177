"""`python -m tools.vm kernel`: fetch and cache Debian kernels that have sched_ext built in.

Takes a trixie(-backports) `linux-image-<abi>-cloud-amd64` (by default the newest; any version the
archive still has on request, each cached in its own directory), downloads it together with its
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
from collections.abc import Callable
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
# one alternative of a Depends field: `name`, `name (= version)`, `name (>= version)`, `name:any`...
_RELATION_RE = re.compile(
    r"^(?P<name>[^\s(:]+)(?::\S+)?\s*(?:\(\s*(?P<op>[<>=]+)\s*(?P<version>[^\s)]+)\s*\))?"
)


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

    def _depends_on(self, kinds: tuple[str, ...]) -> dict[str, str | None]:
        """Package name -> the version an `(= V)` relation pins it to (None: any), in Depends order."""
        wanted = {f"linux-{kind}-{self.abi}-{config.KERNEL_FLAVOUR}" for kind in kinds}
        found: dict[str, str | None] = {}
        for alt in (a for dep in self.depends.split(",") for a in dep.split("|")):
            m = _RELATION_RE.match(alt.strip())
            if m is not None and m["name"] in wanted:
                found[m["name"]] = m["version"] if m["op"] == "=" else None
        return found

    def split_packages(self) -> list[str]:
        """The linux-binary-/linux-base- packages this image depends on (newer split packaging)."""
        return list(self._depends_on(("binary", "base")))

    def kernel_packages(self) -> list[str]:
        """Every package of this very kernel the image depends on: all must exist to install it."""
        return list(self.pinned_packages())

    def pinned_packages(self) -> dict[str, str | None]:
        """kernel_packages() with the exact version each must have (None where Depends pins none)."""
        return self._depends_on(("binary", "base", "modules"))


def missing_options(opts: dict[str, str]) -> list[str]:
    return [o for o in REQUIRED_CONFIG if opts.get(o) != "y"]


def kernel_root() -> Path:
    return config.cache_dir() / "kernel"


def current() -> KernelInfo | None:
    """The default kernel, or None when none is prepared (or its files are gone)."""
    try:
        release = json.loads((kernel_root() / "current.json").read_text())["release"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    info = _cached(release)
    if info is None and (kernel_root() / release / "vmlinuz").is_file():
        # prepared before each kernel carried its own info.json: current.json holds the same fields
        try:
            info = KernelInfo(**json.loads((kernel_root() / "current.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None
        atomic_write_text(info.dir(kernel_root()) / "info.json", json.dumps(asdict(info), indent=2) + "\n")
        info = _cached(release)  # the same completeness check as every other cached kernel (config too)
    return info


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


def headers_dir(info: KernelInfo) -> Path:
    """The kernel's headers packages unpacked (usr/src/..., usr/lib/linux-kbuild-...), when prepared."""
    return info.dir(kernel_root()) / "headers"


def headers_ready(info: KernelInfo) -> bool:
    return (headers_dir(info) / ".complete").is_file()


def header_packages(info: KernelInfo) -> list[str]:
    """What `apt install linux-headers-RELEASE` brings of this very kernel (exact versions)."""
    abi = abi_of(info.release)
    names = [f"linux-headers-{info.release}", f"linux-headers-{abi}-common", f"linux-kbuild-{abi}"]
    return [f"{n}={info.version}" for n in names]


def prepare_headers(info: KernelInfo) -> Path:
    """Download and unpack the kernel's headers beside it (once); bcc in the guest compiles against them.

    Unpacked with dpkg-deb -x like the kernel itself, never installed: the guest sees them through
    bind mounts of the run disk (tools.vm.rundisk), so the base image stays the same for every kernel.
    """
    dest = headers_dir(info)
    with config.cache_lock("kernel"):
        if headers_ready(info):
            return dest
        apt = PrivateApt(config.cache_dir() / "apt")
        if not any((apt.root / "state" / "lists").glob("*_Packages*")):
            apt.update()
        log.info("fetching kernel headers", release=info.release, version=info.version)
        with tempfile.TemporaryDirectory(dir=info.dir(kernel_root()), prefix=".headers-") as tmp:
            work = Path(tmp)
            try:
                debs = apt.download(header_packages(info), work / "debs")
            except VMError:
                apt.update()  # the lists may predate this kernel's headers
                debs = apt.download(header_packages(info), work / "debs")
            _extract(debs, work / "root")
            shutil.rmtree(work / "root" / "usr" / "share", ignore_errors=True)
            if not (work / "root" / "usr" / "src" / f"linux-headers-{info.release}").is_dir():
                raise VMError(f"the headers packages of {info.release} hold no "
                              f"usr/src/linux-headers-{info.release}")
            shutil.rmtree(dest, ignore_errors=True)
            (work / "root").rename(dest)
        (dest / ".complete").touch()
    log.info("kernel headers ready", release=info.release, path=str(dest))
    return dest


def candidates(apt: PrivateApt) -> list[Candidate]:
    """The archive's cloud kernels that can still be installed, newest first.

    The archive keeps a kernel's signed image long after the unsigned `linux` source that built its
    split-out packages (config, modules) has moved on: such an image cannot be installed on a Debian
    system any more, so it is not a kernel our users can run, and is left out.
    """
    names = [n for n in apt.pkgnames("linux-image-") if _IMAGE_RE.match(n)]
    if not names:
        return []
    present = set(apt.pkgnames("linux-"))
    found = [Candidate(s["Package"], s.get("Version", ""), s.get("Depends", "")) for s in apt.show(*names)]
    found = [c for c in found if all(dep in present for dep in c.kernel_packages())]
    # A package of the same name but another version does not do either: a re-upload of one kernel
    # (7.0.12-2 after 7.0.12-1) replaces its split packages while the old signed image lingers, and
    # apt-get download of the pinned version would then fail instead of trying the next kernel.
    pinned = sorted({p for c in found for p, v in c.pinned_packages().items() if v is not None})
    have = {(s["Package"], s.get("Version", "")) for s in apt.show(*pinned)} if pinned else set()
    found = [c for c in found if all(v is None or (p, v) in have for p, v in c.pinned_packages().items())]
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
        _reject(cand, missing)
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
    atomic_write_text(dest / "info.json", json.dumps(asdict(info), indent=2) + "\n")
    return info


def _cached(release: str) -> KernelInfo | None:
    """The kernel cached under `release`, or None (also when its files are incomplete)."""
    try:
        info = KernelInfo(**json.loads((kernel_root() / release / "info.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None
    d = info.dir(kernel_root())
    return info if (d / "vmlinuz").is_file() and (d / "config").is_file() else None


def cached() -> list[KernelInfo]:
    """Every prepared kernel, newest first."""
    current()  # gives a default kernel prepared before info.json existed its own
    root = kernel_root()
    found = [i for d in root.iterdir() if d.is_dir() and (i := _cached(d.name))] if root.is_dir() else []
    order = sort_versions([i.version for i in found])
    return sorted(found, key=lambda i: order.index(i.version))


def abi_of(release: str) -> str:
    """`7.2.12+deb13` from `7.2.12+deb13-cloud-amd64`."""
    return release.removesuffix(f"-{config.KERNEL_FLAVOUR}")


def matches(spec: str, abi: str) -> bool:
    """Does a version spec name this kernel? `7.2` is a series, `7.2.12` or `7.2.12+deb13` one kernel."""
    spec = abi_of(spec)
    return abi == spec or abi.startswith(spec + ".") or abi.startswith(spec + "+")


def series(abi: str) -> str:
    """`7.2` from `7.2.12+deb13`: kernels of one series share their sched_ext interface."""
    return ".".join(re.split(r"[.+~-]", abi)[:2])


def _rejected() -> dict[str, list[str]]:
    """Versions already downloaded and found without what the guest needs (package version -> why)."""
    try:
        data = json.loads((kernel_root() / "rejected.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _reject(cand: Candidate, missing: list[str]) -> None:
    data = _rejected()
    data[cand.version] = missing
    atomic_write_text(kernel_root() / "rejected.json", json.dumps(data, indent=2, sort_keys=True) + "\n")


def prepare(version: str | None = None, refresh: bool = False) -> KernelInfo:
    """Return a cached kernel, fetching it when absent (or asked to look again).

    `version`: None, the default kernel (the newest when it was prepared); `newest` / `oldest`, the
    newest / oldest kernel in the archive that has sched_ext; a series (`6.16`, its newest kernel) or
    one kernel (`6.16.12`, `6.16.12+deb13`, the full release). Without `refresh` a cached kernel that
    matches is used without asking the archive, so runs work offline once a kernel is prepared.
    """
    with config.cache_lock("kernel"):
        if version is None:
            if not refresh and (info := current()) is not None:
                log.info("kernel cached", release=info.release, version=info.version)
                return info
            info = _fetch(_newest_first)
            atomic_write_text(kernel_root() / "current.json", json.dumps(asdict(info), indent=2) + "\n")
            return info
        return _prepare_spec(version, refresh)


def _alias_path() -> Path:
    return kernel_root() / "aliases.json"


def _aliases() -> dict[str, str]:
    try:
        data = json.loads(_alias_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _prepare_spec(spec: str, refresh: bool) -> KernelInfo:
    if spec in ("newest", "oldest"):
        release = _aliases().get(spec)
        if not refresh and release and (info := _cached(release)) is not None:
            return info
        info = _fetch(_newest_first if spec == "newest" else _oldest_first)
        atomic_write_text(_alias_path(), json.dumps({**_aliases(), spec: info.release}, indent=2) + "\n")
        return info
    if not refresh:
        for info in cached():
            if matches(spec, abi_of(info.release)):
                log.info("kernel cached", release=info.release, version=info.version)
                return info
    return _fetch(lambda cands: [c for c in cands if matches(spec, c.abi)], what=f"version {spec}")


def _newest_first(cands: list[Candidate]) -> list[Candidate]:
    return cands


def _oldest_first(cands: list[Candidate]) -> list[Candidate]:
    return list(reversed(cands))


def available(refresh: bool = True) -> list[Candidate]:
    """The archive's cloud kernels, newest first, less those known to lack sched_ext.

    Without `refresh` the package lists of the last update are used (no network), unless there are
    none: a sources.list alone is what an interrupted first update leaves, and would list nothing.
    """
    apt = PrivateApt(config.cache_dir() / "apt")
    # the kernel lock: _fetch updates the same private lists, and two apt-get updates on one
    # Dir::State (apt's own locking is off there) can leave them half-written
    with config.cache_lock("kernel"):
        if refresh or not any((apt.root / "state" / "lists").glob("*_Packages*")):
            apt.update()
        bad = _rejected()
        return [c for c in candidates(apt) if c.version not in bad]


def _fetch(pick: Callable[[list[Candidate]], list[Candidate]], what: str = "") -> KernelInfo:
    """Download the first kernel `pick` orders from the archive's list that qualifies."""
    apt = PrivateApt(config.cache_dir() / "apt")
    apt.update()
    bad = _rejected()
    cands = [c for c in pick(candidates(apt)) if c.version not in bad]
    if not cands:
        raise VMError(f"no linux-image-*-{config.KERNEL_FLAVOUR} {what or 'package'} found in "
                      f"{', '.join(config.KERNEL_SUITES)} (list them: python -m tools.vm kernel --list)")
    kernel_root().mkdir(parents=True, exist_ok=True)
    for cand in cands[:MAX_CANDIDATES]:
        info = _cached(f"{cand.abi}-{config.KERNEL_FLAVOUR}")
        if info is not None and info.version == cand.version:
            return info
        log.info("trying kernel", package=cand.package, version=cand.version)
        with tempfile.TemporaryDirectory(dir=kernel_root(), prefix=".work-") as tmp:
            info = _try(apt, cand, Path(tmp))
        if info is not None:
            boot_image(info)  # extract the PVH-bootable vmlinux now, not during the first run
            log.info("kernel ready", release=info.release, version=info.version)
            return info
    raise VMError(
        f"none of the {min(len(cands), MAX_CANDIDATES)} {config.KERNEL_FLAVOUR} kernels tried "
        f"({what or 'newest first'}) has {', '.join(REQUIRED_CONFIG)} built in"
    )
