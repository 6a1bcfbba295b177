"""KVM or TCG: use KVM only where a real guest boot under it has been seen to work.

On the development machines /dev/kvm exists but guests die early with "KVM internal error", so
the probe boots the real guest kernel under KVM without a root disk: reaching the root-mount
panic proves that KVM runs the kernel; the first "KVM internal error" ends the probe at once. The
verdicts are cached side by side, one per host kernel, QEMU and guest kernel: a test run that
boots several guest kernels probes each once, not at every switch between them.
$SCXCTL_VM_ACCEL=kvm|tcg overrides the probe.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from scxctl.fsutil import atomic_write_text
from scxctl.log import get_logger
from tools.vm import config

log = get_logger("tools.vm.accel")

PROBE_TIMEOUT_S = 45.0
# the kernel got as far as mounting root: KVM ran it through early boot
_BOOTED = ("VFS: Unable to mount root", "Kernel panic", "Run /init", "Freeing unused kernel")
_KVM_BROKEN = ("KVM internal error", "KVM: entry failed", "kvm run failed", "failed to initialize kvm")


@dataclass(frozen=True)
class Verdict:
    kvm: bool
    reason: str
    key: str


def probe_key(kernel: Path, qemu_version: str) -> str:
    return f"{platform.release()}|{qemu_version}|{kernel.parent.name}"


def interpret(console: str, stderr: str, returncode: int | None) -> tuple[bool, str]:
    """Decide from what one KVM probe boot printed; returncode None means it had to be killed."""
    for marker in _KVM_BROKEN:
        if marker.lower() in stderr.lower():
            line = next((ln for ln in stderr.splitlines() if marker.lower() in ln.lower()), marker)
            return False, f"KVM guest failed: {line.strip()}"
    if any(m in console for m in _BOOTED):
        return True, "the guest kernel booted under KVM"
    if returncode is None:
        return False, "the KVM probe guest printed nothing and hung"
    return False, f"QEMU with KVM exited {returncode} before the kernel booted: {stderr.strip()[-200:]}"


def _cache_file() -> Path:
    return config.cache_dir() / "kvm-probe.json"


def _qemu_version(qemu: str) -> str:
    out = subprocess.run([qemu, "--version"], capture_output=True, text=True, check=False).stdout
    return out.splitlines()[0] if out else "unknown"


def _probe(qemu: str, kernel: Path) -> tuple[bool, str]:
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is missing or not accessible"
    with tempfile.TemporaryDirectory(prefix="scxvm-kvm-probe-") as tmp:
        console, errfile = Path(tmp) / "console.log", Path(tmp) / "stderr.log"
        cmd = [
            qemu, "-machine", "q35", "-accel", "kvm", "-cpu", "host", "-smp", "1", "-m", "512M",
            "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-kernel", str(kernel), "-append", "console=ttyS0 panic=-1 root=/dev/scxvm-none",
            "-chardev", f"file,id=con,path={console}", "-serial", "chardev:con",
        ]  # fmt: skip
        with open(errfile, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        rc: int | None = None
        while time.monotonic() < deadline:
            rc = proc.poll()
            text = console.read_text(errors="replace") if console.exists() else ""
            # QEMU stays alive, its guest paused, after a KVM internal error: no need to wait it out
            broken = any(m.lower() in errfile.read_text(errors="replace").lower() for m in _KVM_BROKEN)
            if rc is not None or broken or any(m in text for m in _BOOTED):
                break
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        text = console.read_text(errors="replace") if console.exists() else ""
        return interpret(text, errfile.read_text(errors="replace"), rc)


def choose(qemu: str, kernel: Path, refresh: bool = False) -> Verdict:
    forced = os.environ.get("SCXCTL_VM_ACCEL", "").strip().lower()
    if forced in ("kvm", "tcg"):
        return Verdict(forced == "kvm", f"forced by SCXCTL_VM_ACCEL={forced}", "env")
    key = probe_key(kernel, _qemu_version(qemu))
    cached = _cached_verdicts()
    if not refresh and key in cached:
        return cached[key]
    started = time.monotonic()
    ok, reason = _probe(qemu, kernel)
    verdict = Verdict(ok, reason, key)
    log.info("KVM probe", kvm=ok, reason=reason, seconds=round(time.monotonic() - started, 1))
    cached[key] = verdict
    doc = {"verdicts": [asdict(v) for v in cached.values()]}
    atomic_write_text(_cache_file(), json.dumps(doc, indent=2) + "\n")
    return verdict


def _cached_verdicts() -> dict[str, Verdict]:
    """Every verdict in the cache file by key (an unreadable file is an empty cache)."""
    try:
        doc = json.loads(_cache_file().read_text())
        return {v.key: v for v in (Verdict(**d) for d in doc["verdicts"])}
    except (OSError, ValueError, TypeError, KeyError):
        return {}
