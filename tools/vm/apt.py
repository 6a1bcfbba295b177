"""A private apt configuration for downloading trixie packages on a bookworm host.

Own sources list, state and cache under the harness cache dir: the host's apt sources, lists and
installed packages are never touched (no trixie package is ever installed on the host).
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from scxctl.log import get_logger
from tools.vm import config
from tools.vm.codes import VMError

log = get_logger("tools.vm.apt")


class PrivateApt:
    def __init__(self, root: Path, suites: tuple[str, ...] = config.KERNEL_SUITES) -> None:
        self.root = root
        self.suites = suites

    @property
    def sources(self) -> Path:
        return self.root / "sources.list"

    def options(self) -> list[str]:
        """apt -o options that point every piece of state into `root`."""
        r = self.root
        return [
            "-o", f"Dir::Etc::sourcelist={self.sources}",
            "-o", "Dir::Etc::sourceparts=-",
            "-o", "Dir::Etc::preferences=/dev/null",
            "-o", "Dir::Etc::preferencesparts=-",
            "-o", f"Dir::State={r / 'state'}",
            "-o", f"Dir::State::status={r / 'state' / 'status'}",
            "-o", f"Dir::Cache={r / 'cache'}",
            "-o", "APT::Architecture=amd64",
            "-o", "APT::Sandbox::User=root",
            "-o", "Debug::NoLocking=1",
            "-q",
        ]  # fmt: skip

    def setup(self) -> None:
        for sub in ("state/lists/partial", "cache/archives/partial"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "state" / "status").touch()
        lines = [f"deb [signed-by={config.KEYRING}] {config.MIRROR} {s} main" for s in self.suites]
        self.sources.write_text("\n".join(lines) + "\n")

    def _run(self, tool: str, *args: str, cwd: Path | None = None) -> str:
        cmd = [tool, *self.options(), *args]
        try:
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
        except FileNotFoundError as exc:
            raise VMError(f"{tool} not found: {exc}", hint="run scripts/install.sh") from None
        if proc.returncode != 0:
            raise VMError(f"{' '.join(cmd[:1] + list(args))} failed: {proc.stderr.strip()[-400:]}")
        return proc.stdout

    def update(self) -> None:
        self.setup()
        log.info("apt update (private trixie sources)", root=str(self.root))
        self._run("apt-get", "update")

    def pkgnames(self, prefix: str) -> list[str]:
        return self._run("apt-cache", "pkgnames", prefix).split()

    def show(self, *packages: str) -> list[dict[str, str]]:
        """All available versions of `packages` as parsed control stanzas."""
        return parse_stanzas(self._run("apt-cache", "show", *packages))

    def download(self, specs: list[str], dest: Path) -> list[Path]:
        dest.mkdir(parents=True, exist_ok=True)
        before = set(dest.glob("*.deb"))
        self._run("apt-get", "download", *specs, cwd=dest)
        return sorted(set(dest.glob("*.deb")) - before) or sorted(dest.glob("*.deb"))


def parse_stanzas(text: str) -> list[dict[str, str]]:
    """Parse deb822 control text (apt-cache show) into dicts; continuation lines are joined."""
    stanzas: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if not line.strip():
            if cur:
                stanzas.append(cur)
            cur, key = {}, ""
        elif line[0] in " \t" and key:
            cur[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            cur[key] = value.strip()
    if cur:
        stanzas.append(cur)
    return stanzas


@functools.cache
def _compare(a: str, b: str) -> int:
    if a == b:
        return 0
    lt = subprocess.run(["dpkg", "--compare-versions", a, "lt", b], check=False).returncode == 0
    return -1 if lt else 1


def sort_versions(versions: list[str], newest_first: bool = True) -> list[str]:
    """Debian version strings in dpkg's own order."""
    return sorted(versions, key=functools.cmp_to_key(_compare), reverse=newest_first)
