"""The cached build chroot: overlayfs layers built once, then only ever mounted read-only.

  base   trixie minbase (debootstrap through tools.vm.image), apt without recommends, a `builder`
         user; the autopkgtest installs the .deb on this, so the package's Depends alone must do
  build  base + build-essential + `apt-get build-dep` of packaging/debian/control
  lint   build + lintian, a layer of its own so that lintian's dependencies never reach a build

A layer's key hashes its parent's key and its own recipe (the Build-Depends text for `build`), as
tools/vm/image.py keys the guest image: editing Build-Depends rebuilds `build` and `lint` only.
Every use mounts a fresh overlay (`session`) whose upper dir is deleted afterwards, so no build,
installed .deb or test ever changes a cached layer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scxctl import fsutil, paths
from scxctl.errors import ExitCode, ScxctlError
from scxctl.fsutil import atomic_write_text
from scxctl.log import get_logger
from tools.vm import config, image

log = get_logger("tools.deb.chroot")

CHECKOUT = Path(__file__).resolve().parents[2]
CONTROL = CHECKOUT / "packaging" / "debian" / "control"
BUILDER = "builder"  # builds and lintian run unprivileged, as on a buildd: Rules-Requires-Root: no
BUILD_TOOLS = ("build-essential",)  # what dpkg-buildpackage assumes besides Build-Depends
LINT_TOOLS = ("lintian",)
APT_CONF = """\
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Dpkg::Options { "--force-unsafe-io"; };
"""
BASE_SETUP = f"""\
apt-get -q update
useradd --create-home --home-dir /build --shell /bin/sh {BUILDER}
"""
ENV = {
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    "DEBIAN_FRONTEND": "noninteractive",
    "LANG": "C.UTF-8",
    "HOME": "/root",
}
LAYERS = ("base", "build", "lint")


class DebError(ScxctlError):
    """A package build failure: one line (the log file named) plus a hint."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILURE, hint: str | None = None) -> None:
        super().__init__(message, code, hint)


def cache_dir() -> Path:
    """The package chroot's cache (scxctl.paths.dev_cache_dir: machine-wide as root, $SCXCTL_DEB_CACHE)."""
    return paths.dev_cache_dir("deb", CHECKOUT)


def build_depends(control_text: str) -> str:
    """Build-Depends(-Arch/-Indep) of the source stanza, whitespace normalised: the `build` layer's key."""
    source = control_text.split("\n\n", 1)[0]
    fields: list[str] = []
    for name in ("Build-Depends", "Build-Depends-Arch", "Build-Depends-Indep"):
        m = re.search(rf"^{name}:(.*(?:\n[ \t].*)*)", source, re.MULTILINE)
        if m:
            deps = [d.strip() for d in " ".join(m.group(1).split()).split(",") if d.strip()]
            fields.append(f"{name}: {', '.join(deps)}")
    return "\n".join(fields)


def recipes(control_text: str | None = None) -> dict[str, dict[str, object]]:
    """Everything that determines each layer's content."""
    text = control_text if control_text is not None else CONTROL.read_text()
    return {
        "base": {"suite": config.SUITE, "mirror": config.MIRROR, "variant": "minbase",
                 "apt_conf": APT_CONF, "setup": BASE_SETUP, "builder": BUILDER},
        "build": {"tools": sorted(BUILD_TOOLS), "build_depends": build_depends(text)},
        "lint": {"tools": sorted(LINT_TOOLS)},
    }


def layer_keys(control_text: str | None = None) -> dict[str, str]:
    """Each layer's cache key: its recipe chained with its parent's key."""
    keys: dict[str, str] = {}
    parent = ""
    for name, rec in recipes(control_text).items():
        blob = json.dumps({"parent": parent, "recipe": rec}, sort_keys=True).encode()
        parent = keys[name] = hashlib.sha256(blob).hexdigest()[:16]
    return keys


@dataclass(frozen=True)
class Layers:
    """The cached layers of the current recipe, top-most last."""

    dirs: dict[str, Path]

    def stack(self, top: str) -> list[Path]:
        """Overlay lowerdirs for `top` and everything below it, top-most first (overlayfs order)."""
        names = LAYERS[: LAYERS.index(top) + 1]
        return [self.dirs[n] for n in reversed(names)]


def _layer_dir(name: str, key: str) -> Path:
    return cache_dir() / "layers" / f"{name}-{key}"


def _complete(path: Path) -> bool:
    return path.is_dir() and path.with_suffix(".json").is_file()


@contextlib.contextmanager
def lock() -> Iterator[None]:
    """One build at a time per cache: layers and sessions share its directories."""
    with fsutil.locked(cache_dir() / ".lock"):
        yield


def run_logged(argv: list[str], what: str, log_name: str, check: bool = True) -> tuple[int, str]:
    """Run a long step with its output in `logs/<log_name>.log`; a failure names the log and its tail."""
    logs = cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"{log_name}.log"
    log.info(what, log=str(path))
    with open(path, "w") as f:
        try:
            rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                check=False).returncode
        except FileNotFoundError as exc:
            raise DebError(f"{what}: {exc}", hint="run scripts/install.sh") from None
    text = path.read_text(errors="replace")
    if check and rc != 0:
        tail = "\n".join(text.splitlines()[-25:])
        raise DebError(f"{what} failed ({rc}); full log: {path}\n{tail}")
    return rc, text


def chroot_argv(root: Path, script: str, user: str | None = None,
                env: dict[str, str] | None = None) -> list[str]:
    """`sh -ec script` in the chroot with a clean environment (nothing of the host's leaks in)."""
    merged = {**ENV, **({"HOME": "/build"} if user else {}), **(env or {})}
    argv = ["chroot"]
    if user:
        argv.append(f"--userspec={user}:{user}")
    return [*argv, str(root), "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in merged.items()),
            "/bin/sh", "-ec", script]


def _mount(argv: list[str], what: str) -> None:
    image.run_step(["mount", *argv], what)


def _umount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], check=False)


@dataclass(frozen=True)
class Session:
    """A throw-away overlay of some layers, mounted at `root` with /proc (and the apt archive cache)."""

    root: Path

    def run(self, script: str, what: str, log_name: str, user: str | None = None,
            env: dict[str, str] | None = None, check: bool = True) -> tuple[int, str]:
        return run_logged(chroot_argv(self.root, script, user, env), what, log_name, check)

    def builder_ids(self) -> tuple[int, int]:
        for line in (self.root / "etc" / "passwd").read_text().splitlines():
            f = line.split(":")
            if f[0] == BUILDER:
                return int(f[2]), int(f[3])
        raise DebError(f"no user {BUILDER} in the chroot",
                       hint="rebuild it: python -m tools.deb chroot --refresh")

    def give_to_builder(self, path: Path) -> None:
        """chown -R to the builder (it writes its build tree and the results beside it)."""
        uid, gid = self.builder_ids()
        os.lchown(path, uid, gid)
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), uid, gid)


@contextlib.contextmanager
def session(lowers: list[Path], upper: Path | None = None, archives: bool = False) -> Iterator[Session]:
    """Mount an overlay of `lowers` (top-most first); its writes go to `upper` (kept: a new layer)
    or to a temporary dir that is deleted with the session."""
    tmp_root = cache_dir() / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=tmp_root, prefix="session-"))
    upper = upper or work / "upper"
    merged = work / "root"
    for d in (upper, work / "work", merged):
        d.mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={':'.join(map(str, lowers))},upperdir={upper},workdir={work / 'work'}"
    try:
        _mount(["-t", "overlay", "overlay", "-o", opts, str(merged)], "mount the chroot overlay")
    except ScxctlError as exc:
        image.remove_tree(work)
        raise DebError(f"cannot mount an overlay for the build chroot: {exc.message}",
                       hint="put the cache (SCXCTL_DEB_CACHE) on a file system overlayfs accepts "
                       "as upper dir (ext4, xfs)") from None
    try:
        with image.chroot_mounts(merged):
            cache = merged / "var" / "cache" / "apt" / "archives"
            if archives:
                _mount(["--bind", str(archive_cache()), str(cache)], "bind the apt archive cache")
            try:
                yield Session(merged)
            finally:
                if archives:
                    _umount(cache)
    finally:
        _umount(merged)
        image.remove_tree(work)


def archive_cache() -> Path:
    """Downloaded .debs, kept between layers and sessions (apt's partial/ dir must exist)."""
    path = cache_dir() / "archives"
    (path / "partial").mkdir(parents=True, exist_ok=True)
    return path


def _make_base(dest: Path) -> None:
    if shutil.which("debootstrap") is None:
        raise DebError("debootstrap is not installed: it makes the build chroot",
                       hint="apt-get install debootstrap (scripts/install.sh does)")
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".base-"))
    try:
        root = tmp / "root"
        image.debootstrap(root, cache_dir() / "debs")
        (root / "etc/apt/apt.conf.d/90scxctl-deb").write_text(APT_CONF)
        policy = root / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")  # no service starts inside the chroot
        policy.chmod(0o755)
        with image.chroot_mounts(root):
            run_logged(chroot_argv(root, BASE_SETUP), "set up the base chroot", "layer-base")
        os.replace(root, dest)
    finally:
        image.remove_tree(tmp)


def _make_layer(name: str, dest: Path, lowers: list[Path]) -> None:
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{name}-"))
    try:
        upper = tmp / "upper"
        upper.mkdir()
        with session(lowers, upper=upper, archives=True) as s:
            if name == "build":
                control = s.root / "tmp" / "build-deps" / "debian" / "control"
                control.parent.mkdir(parents=True)
                shutil.copyfile(CONTROL, control)
                script = (f"apt-get -q update\napt-get -q -y install {' '.join(BUILD_TOOLS)}\n"
                          "apt-get -q -y build-dep /tmp/build-deps\nrm -rf /tmp/build-deps\n")
            else:
                script = f"apt-get -q -y install {' '.join(LINT_TOOLS)}\n"
            s.run(script, f"install the {name} layer's packages", f"layer-{name}")
        os.replace(upper, dest)
    finally:
        image.remove_tree(tmp)


def prepare(refresh: bool = False) -> tuple[Layers, float, list[str]]:
    """The current recipe's layers, building the missing ones: (layers, seconds spent, names built).
    The caller holds `lock()`."""
    if os.geteuid() != 0:
        raise DebError("building the package chroot needs root (debootstrap, chroot, mount)",
                       ExitCode.PERMISSION, hint="run as root")
    keys = layer_keys()
    root = cache_dir() / "layers"
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    dirs: dict[str, Path] = {}
    built: list[str] = []
    stale = refresh
    for name in LAYERS:
        dest = _layer_dir(name, keys[name])
        if stale or not _complete(dest):
            stale = True  # a rebuilt layer invalidates every layer above it
            image.remove_tree(dest)
            dest.with_suffix(".json").unlink(missing_ok=True)
            t = time.monotonic()
            if name == "base":
                _make_base(dest)
            else:
                _make_layer(name, dest, [dirs[n] for n in reversed(LAYERS[: LAYERS.index(name)])])
            meta = {"key": keys[name], "recipe": recipes()[name], "seconds": round(time.monotonic() - t, 1)}
            atomic_write_text(dest.with_suffix(".json"), json.dumps(meta, indent=2) + "\n")
            built.append(name)
            log.info("layer ready", layer=name, path=str(dest), seconds=meta["seconds"])
        dirs[name] = dest
    current = {p.name for p in dirs.values()}
    for old in root.iterdir():  # keep only the current recipe's layers
        if old.name.split("-")[0] in LAYERS and old.name.removesuffix(".json") not in current:
            if old.is_dir():
                image.remove_tree(old)
            else:
                old.unlink(missing_ok=True)
    return Layers(dirs), time.monotonic() - t0, built
