"""Build, lint, rebuild-and-compare and autopkgtest the .deb, each in its own overlay of the chroot.

The source that goes in is the working tree as git sees it (tracked and untracked-but-not-ignored
files), not `git archive HEAD`: uncommitted work is what a developer means to package, and ignored
build outputs (bpf/build/, .venv/, .pybuild/) must not leak into the package. `debian` is a symlink
to packaging/debian in that copy only, so debhelper's output never lands in the checkout.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from scxctl.log import get_logger
from tools.deb import chroot
from tools.deb.chroot import BUILDER, CHECKOUT, DebError, Layers

log = get_logger("tools.deb.build")

PACKAGE = "scxctl"
ARTEFACTS = (".deb", ".buildinfo", ".changes")
# E: error, W: warning, P: pedantic; I: (info) and O: (overridden) lines are shown but pass
LINT_FAIL = re.compile(r"^([EWP]): ")


def source_files(checkout: Path = CHECKOUT) -> list[str]:
    """Tracked and untracked-not-ignored files that exist (a deleted tracked file is left out)."""
    try:
        out = subprocess.run(["git", "-C", str(checkout), "ls-files", "-z", "-co", "--exclude-standard"],
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise DebError(f"cannot list the checkout's files with git: {exc}") from None
    names = sorted({n.decode() for n in out.split(b"\0") if n})
    return [n for n in names if n != "debian" and os.path.lexists(checkout / n)]


def export_tree(dest: Path, checkout: Path = CHECKOUT, debian_dir: bool = False) -> int:
    """Copy the source into `dest` with `debian` -> packaging/debian; returns the number of files.
    `debian_dir`: move packaging/debian to debian/ instead, the layout of the Debian source package
    (lintian's source checks read debian/ and would see the packaging files twice through a link)."""
    names = source_files(checkout)
    for name in names:
        src, dst = checkout / name, dest / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            shutil.copy2(src, dst)
    if debian_dir:
        os.rename(dest / "packaging" / "debian", dest / "debian")
    else:
        (dest / "debian").symlink_to("packaging/debian")
    return len(names)


def changelog_version(checkout: Path = CHECKOUT) -> str:
    first = (checkout / "packaging" / "debian" / "changelog").read_text().splitlines()[0]
    m = re.match(r"^\S+ \(([^)]+)\)", first)
    if not m:
        raise DebError(f"cannot read the version from debian/changelog: {first!r}")
    return m.group(1)


@dataclass
class BuildResult:
    files: list[Path]
    seconds: float
    log_name: str

    @property
    def deb(self) -> Path:
        return next(f for f in self.files if f.suffix == ".deb")


def _collect(parent: Path, out: Path) -> list[Path]:
    found = sorted(f for f in parent.iterdir() if f.name.startswith(f"{PACKAGE}_") and f.suffix in ARTEFACTS)
    if not any(f.suffix == ".deb" for f in found):
        raise DebError(f"dpkg-buildpackage left no {PACKAGE}_*.deb in {parent}")
    out.mkdir(parents=True, exist_ok=True)
    copied = []
    for f in found:
        shutil.copyfile(f, out / f.name)
        copied.append(out / f.name)
    return copied


def build(layers: Layers, out: Path, where: str = "/build/src/scxctl", env: dict[str, str] | None = None,
          umask: str = "022", log_name: str = "build") -> BuildResult:
    """dpkg-buildpackage -us -uc -b as the unprivileged builder on a fresh overlay of `build`."""
    t0 = time.monotonic()
    with chroot.session(layers.stack("build")) as s:
        tree = s.root / where.lstrip("/")
        n = export_tree(tree)
        log.info("source exported", files=n, to=where)
        s.give_to_builder(s.root / "build")
        s.run(f"umask {umask}\ncd {where}\ndpkg-buildpackage -us -uc -b\n", "dpkg-buildpackage -us -uc -b",
              log_name, user=BUILDER, env=env)
        files = _collect(tree.parent, out)
    return BuildResult(files, time.monotonic() - t0, log_name)


def build_working_tree(out: Path) -> Path:
    """The .deb of this working tree, built now in the cached chroot (prepared if need be) into `out`."""
    with chroot.lock():
        layers, _, _ = chroot.prepare()
        return build(layers, out).deb


@dataclass
class LintResult:
    output: str
    failing: list[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.failing


def lint(layers: Layers, files: list[Path], source: bool = True) -> LintResult:
    """lintian --pedantic on the .changes (the .deb and .buildinfo), and on a source package
    made from the same tree (debian/control, rules, copyright and tests are source checks)."""
    t0 = time.monotonic()
    with chroot.session(layers.stack("lint")) as s:
        outdir = s.root / "build" / "out"
        outdir.mkdir(parents=True)
        for f in files:
            shutil.copyfile(f, outdir / f.name)
        targets = ["/build/out/*.changes"]
        script = ""
        if source:
            export_tree(s.root / "build" / "src" / PACKAGE, debian_dir=True)
            script = f"cd /build/src\ndpkg-source --build {PACKAGE} >/dev/null\ncd /\n"
            targets.append("/build/src/*.dsc")
        s.give_to_builder(s.root / "build")
        script += ("lintian --pedantic --display-info --show-overrides --color never --fail-on none "
                   f"{' '.join(targets)}\n")
        _, output = s.run(script, "lintian --pedantic", "lintian", user=BUILDER)
    failing = [line for line in output.splitlines() if LINT_FAIL.match(line)]
    return LintResult(output, failing, time.monotonic() - t0)


def deb_contents(deb: Path) -> dict[str, str]:
    """Every member of the .deb's control and data archives -> mode, owner, size/link and sha256."""
    entries: dict[str, str] = {}
    for part, args in (("control", ["--ctrl-tarfile"]), ("data", ["--fsys-tarfile"])):
        blob = subprocess.run(["dpkg-deb", *args, str(deb)], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            for m in tar.getmembers():
                desc = f"{m.mode:o} {m.uname or m.uid}:{m.gname or m.gid} mtime={m.mtime}"
                if m.isfile():
                    f = tar.extractfile(m)
                    digest = hashlib.sha256(f.read() if f else b"").hexdigest()
                    desc += f" size={m.size} sha256={digest}"
                elif m.issym() or m.islnk():
                    desc += f" -> {m.linkname}"
                entries[f"{part}:{m.name}"] = desc
    return entries


@dataclass
class ReproResult:
    first: Path
    second: Path
    identical: bool
    differences: list[str] = field(default_factory=list)
    seconds: float = 0.0


def check_reproducible(layers: Layers, first: BuildResult, scratch: Path) -> ReproResult:
    """Rebuild in another directory, another time zone and umask; the .debs must be byte-identical
    (else the differing members are listed)."""
    t0 = time.monotonic()
    again = build(layers, scratch, where="/build/elsewhere/with/a/longer/path/scxctl-rebuild",
                  env={"TZ": "Pacific/Kiritimati"}, umask="002", log_name="build-rebuild")
    a, b = first.deb, again.deb
    same = a.read_bytes() == b.read_bytes()
    diffs: list[str] = []
    if not same:
        ca, cb = deb_contents(a), deb_contents(b)
        for name in sorted(set(ca) | set(cb)):
            if ca.get(name) != cb.get(name):
                diffs.append(f"{name}: {ca.get(name, 'absent')} | {cb.get(name, 'absent')}")
        if not diffs:
            diffs.append("same members and contents, different archive bytes (ar/tar headers or compression)")
    return ReproResult(a, b, same, diffs, time.monotonic() - t0)


SUMMARY_MARK = "=== scxctl autopkgtest summary"
# After the tests: purge must remove what the daemon creates at run time and keep the system group.
PURGE_CHECK = """\
apt-get -q -y -o Dpkg::Use-Pty=0 install /build/out/{deb} >/dev/null
for d in /var/lib/scxctl /var/log/scxctl /etc/scxctl /run/scxctl; do mkdir -p "$d" && echo x >"$d/left"; done
apt-get -q -y -o Dpkg::Use-Pty=0 purge scxctl >/dev/null
left=""
for d in /var/lib/scxctl /var/log/scxctl /etc/scxctl /run/scxctl /usr/lib/scxctl; do
    [ ! -e "$d" ] || left="$left $d"
done
if [ -n "$left" ]; then echo "purge: FAIL: left$left"; rc=1
else echo "purge: PASS (/var/lib, /var/log, /etc, /run scxctl removed)"; fi
if getent group scxctl >/dev/null; then echo "purge: the system group scxctl stays (Debian keeps them)"; fi
"""


@dataclass
class TestResult:
    ok: bool
    output: str
    seconds: float

    @property
    def summary(self) -> list[str]:
        """The tests' own output and verdicts, without apt's and autopkgtest's progress lines."""
        _, _, tail = self.output.partition(SUMMARY_MARK + "\n")
        return tail.splitlines()


def autopkgtest(layers: Layers, deb: Path) -> TestResult:
    """autopkgtest (null runner) in a fresh overlay of `base`: the .deb with its Depends only, no
    build dependencies, so a missing Depends shows up as a failing test; then a purge check."""
    t0 = time.monotonic()
    with chroot.session(layers.stack("base"), archives=True) as s:
        outdir = s.root / "build" / "out"
        outdir.mkdir(parents=True)
        shutil.copyfile(deb, outdir / deb.name)
        export_tree(s.root / "build" / "src" / PACKAGE)
        script = (
            "apt-get -q update\n"
            "apt-get -q -y install autopkgtest\n"
            f"rc=0; autopkgtest --output-dir /build/autopkgtest /build/out/{deb.name} /build/src/{PACKAGE}"
            " -- null || rc=$?\n"
            f"echo '{SUMMARY_MARK}'\n"
            "for f in /build/autopkgtest/*-stdout; do [ -s \"$f\" ] && sed \"s|^|${f##*/}: |\" \"$f\"; done\n"
            "cat /build/autopkgtest/summary\n"
            "echo \"autopkgtest exit status: $rc\"\n"
            + PURGE_CHECK.format(deb=deb.name)
            + "exit $rc\n"
        )
        rc, output = s.run(script, "autopkgtest (null runner) and purge", "autopkgtest", check=False)
    return TestResult(rc == 0, output, time.monotonic() - t0)
