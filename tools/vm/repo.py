"""`python -m tools.vm repo DEB`: a local apt repository for the installed-flavour guest.

The guest has no network, so the package tests carry in a flat repository (`deb [trusted=yes]
file:/srv/repo ./`) holding the .deb's whole Depends/Pre-Depends closure, and install the .deb
with `apt-get install ./scxctl_*.deb` the way a user would. The closure is resolved by trixie's own
apt in a trixie chroot (the "resolver", a debootstrap minbase kept in the cache), never by the
host's bookworm apt, whose resolver and archive view differ. apt runs there with an empty dpkg
status: nothing counts as installed, so every dependency is fetched, including those the guest
image already has, and the repository does not depend on what the image happens to contain.

What this catches: a Depends naming a package trixie does not have fails right here (apt's own
message); a dependency the package forgets to declare is absent from the repository, so the
guest's scxctl fails to import. The downloaded .debs stay in the resolver's archive cache, and a
repository is cached by the .deb's content hash, so an unchanged .deb costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from scxctl.fsutil import atomic_write_text
from scxctl.log import get_logger
from tools.vm import config, image
from tools.vm.codes import VMError

log = get_logger("tools.vm.repo")

GUEST_DIR = "/srv/repo"  # where the package tests put the repository in the guest
SOURCES_LINE = f"deb [trusted=yes] file:{GUEST_DIR} ./"
RESOLVER_TOOLS = ("apt-utils",)  # apt-ftparchive: the Packages and Release index in trixie's format
ENV = {
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    "DEBIAN_FRONTEND": "noninteractive",
    "LANG": "C.UTF-8",
    "HOME": "/root",
}
# Paths inside the resolver chroot.
KEEP = 4  # repositories kept (the newest): each rebuilt .deb gets a new one
WORK = "/var/tmp/scxvm-repo"  # one resolution's .deb, empty status and repository
ARCHIVES = "/var/cache/scxvm-debs"  # downloaded .debs, kept across resolutions
# `Inst name (version release [arch])` lines of `apt-get -s install`
_INST_RE = re.compile(r"^Inst (?P<name>\S+) (?:\[[^\]]*\] )?\((?P<version>\S+) .*\[(?P<arch>[^\]]+)\]\)")


class Unresolvable(VMError):
    """trixie cannot satisfy the .deb's dependencies: a fault of the package, not of the harness."""


@dataclass(frozen=True)
class Pkg:
    name: str
    version: str
    arch: str

    def filename(self) -> str:
        """The name apt gives the downloaded file (it escapes the epoch's colon as %3a)."""
        return f"{self.name}_{self.version.replace(':', '%3a')}_{self.arch}.deb"


def parse_simulation(text: str) -> list[Pkg]:
    """The packages an `apt-get -s install` would install, in apt's order."""
    return [
        Pkg(m["name"], m["version"], m["arch"]) for line in text.splitlines() if (m := _INST_RE.match(line))
    ]


def resolver_recipe() -> dict[str, object]:
    return {
        "suite": config.SUITE,
        "mirror": config.MIRROR,
        "variant": "minbase",
        "tools": sorted(RESOLVER_TOOLS),
    }


def resolver_root() -> Path:
    key = image.cache_key(resolver_recipe())
    return config.cache_dir() / "resolver" / key / "root"


def repo_key(deb: Path, extras: tuple[str, ...] = ()) -> str:
    """The .deb's content, the extra packages and the resolver's recipe: a rebuilt .deb gets its own
    repository."""
    h = hashlib.sha256()
    with open(deb, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    h.update(image.cache_key(resolver_recipe()).encode())
    if extras:  # no extras: the key a repository of the .deb alone always had
        h.update(" ".join(sorted(extras)).encode())
    return h.hexdigest()[:16]


def repo_dir(deb: Path, extras: tuple[str, ...] = ()) -> Path:
    return config.cache_dir() / "repo" / repo_key(deb, extras)


def _chroot(root: Path, script: str, what: str, error: type[VMError] = VMError) -> str:
    """`sh -ec script` in the resolver with a clean environment; its stdout, or VMError with the tail."""
    argv = [
        "chroot",
        str(root),
        "/usr/bin/env",
        "-i",
        *(f"{k}={v}" for k, v in ENV.items()),
        "/bin/sh",
        "-ec",
        script,
    ]
    log.info(what)
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr).strip()
        raise error(f"{what} failed ({proc.returncode}):\n{out[-1500:]}")
    return proc.stdout


def _make_resolver(root: Path) -> None:
    parent = root.parent
    parent.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=parent.parent, prefix=".resolver-"))
    try:
        new = tmp / "root"
        image.debootstrap(new, config.cache_dir() / "debs")
        with image.chroot_mounts(new):
            tools = " ".join(RESOLVER_TOOLS)
            script = f"apt-get -q update\napt-get -q -y --no-install-recommends install {tools}"
            _chroot(new, script, "install the resolver's tools")
        parent.mkdir(parents=True, exist_ok=True)
        os.replace(new, root)
        atomic_write_text(parent / "meta.json", json.dumps(resolver_recipe(), indent=2) + "\n")
    finally:
        image.remove_tree(tmp)
    for old in parent.parent.iterdir():  # keep only the current recipe's resolver
        if old.is_dir() and old != parent and not old.name.startswith("."):
            image.remove_tree(old)


def package_name(deb: Path) -> str:
    proc = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Package"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise VMError(f"not a Debian package: {deb}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def build(deb: Path, force: bool = False, extras: tuple[str, ...] = ()) -> Path:
    """The repository directory for `deb` (Packages, Release and the closure's .debs), cached.

    `extras`: archive packages the guest installs beside it (what it Suggests), with their closure.
    They are only offered: apt still installs the .deb with its declared Depends alone.
    """
    deb = deb.resolve()
    if not deb.is_file():
        raise VMError(f"no such .deb: {deb}")
    name = package_name(deb)
    dest = repo_dir(deb, extras)
    if not force and (dest / "meta.json").is_file():
        os.utime(dest)  # in use: the newest for _evict
        return dest
    if os.geteuid() != 0:
        raise VMError(
            "building the local apt repository needs root (debootstrap, chroot)", hint="run as root"
        )
    with config.cache_lock("resolver"):
        if not force and (dest / "meta.json").is_file():
            return dest
        root = resolver_root()
        if not (root.parent / "meta.json").is_file():
            _make_resolver(root)
        return _resolve(root, deb, name, dest, extras)


def _resolve(root: Path, deb: Path, name: str, dest: Path, extras: tuple[str, ...]) -> Path:
    work = root / WORK.lstrip("/")
    shutil.rmtree(work, ignore_errors=True)
    (work / "repo").mkdir(parents=True)
    (work / "status").touch()  # an empty dpkg status: nothing is installed
    shutil.copy2(deb, work / deb.name)
    (root / ARCHIVES.lstrip("/") / "partial").mkdir(parents=True, exist_ok=True)
    apt = (
        f"apt-get -q -y --no-install-recommends -o Dir::State::status={WORK}/status "
        f"-o Dir::Cache::archives={ARCHIVES}/"
    )
    local = " ".join([f"{WORK}/{deb.name}", *extras])
    with image.chroot_mounts(root):
        _chroot(root, "apt-get -q update", "apt-get update (resolver)")
        what = f"resolve the dependencies of {deb.name} (trixie apt)"
        sim = _chroot(root, f"{apt} -s install {local}", what, error=Unresolvable)
        closure = [p for p in parse_simulation(sim) if p.name != name]
        if not closure:
            raise VMError(f"apt resolved no packages for {deb.name}; its output:\n{sim[-1500:]}")
        _chroot(root, f"{apt} --download-only install {local}", "download the dependency closure")
    archives = root / ARCHIVES.lstrip("/")
    for p in closure:
        src = archives / p.filename()
        if not src.is_file():
            raise VMError(f"apt did not leave {p.filename()} in {archives}")
        os.link(src, work / "repo" / p.filename())
    # Release is written beside the repository first: inside it, it would list its own empty self
    index = f"cd {WORK}/repo\napt-ftparchive packages . >Packages\napt-ftparchive release . >../Release\n"
    _chroot(root, index + "mv ../Release Release", "index the repository (apt-ftparchive)")
    meta = {"deb": deb.name, "package": name, "extras": list(extras),
            "packages": [f"{p.name}={p.version}" for p in closure]}
    atomic_write_text(work / "repo" / "meta.json", json.dumps(meta, indent=2) + "\n")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".repo-"))
    try:
        # hard links where the cache shares the resolver's file system: the .debs are in its archive
        shutil.copytree(work / "repo", tmp / "repo", copy_function=_link_or_copy)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp / "repo", dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    log.info("repository ready", path=str(dest), packages=len(closure))
    _evict(dest.parent)
    return dest


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _evict(root: Path) -> None:
    """Keep the KEEP newest repositories: every package build would otherwise add one for good."""
    repos = sorted((d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")),
                   key=lambda d: d.stat().st_mtime, reverse=True)  # fmt: skip
    for old in repos[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
