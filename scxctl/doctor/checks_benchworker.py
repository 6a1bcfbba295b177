"""`scxctl bench`'s native worker: which one bench would run, was it built from these sources, does
it start here?

The bench's timed roles are native code (native/scxctl-bench-worker.c), found like the BPF object
($SCXCTL_BENCH_WORKER, the checkout's native/build/, /usr/lib/scxctl/) and refused when stale. A
missing, stale or unrunnable worker stops only the bench, never pyland, so this check warns rather
than fails: the verdict about running schedulers stays true.
"""

from __future__ import annotations

import subprocess

from scxctl.bench import worker
from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, result

CID = "bench.worker"
_BUILD_HINT = "build it with: make -C bpf (or make -C native); the scxctl package installs it"


def _short(h: str | None) -> str:
    return h[:12] if h else "none"


def _runs(path: str) -> str | None:
    """None when the worker starts and answers its self-check, else why not."""
    try:
        proc = subprocess.run([path, "--check"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return getattr(exc, "strerror", None) or str(exc)
    if proc.returncode != 0 or proc.stdout.strip() != "ok":
        said = (proc.stdout + proc.stderr).strip().splitlines()
        return f"exit status {proc.returncode}" + (f": {said[-1]}" if said else "")
    return None


@check(CID, "bench worker")
def bench_worker(ctx: DoctorContext) -> CheckResult:
    v = worker.inspect()
    details = v.details()
    if v.chosen is None:
        looked = ", ".join(str(c.path) for c in v.candidates)
        return result(CID, Status.WARN, f"scxctl bench cannot run: no worker (looked at {looked})",
                      _BUILD_HINT, **details)
    c = v.chosen
    where = f"{c.path} ({c.origin})"
    if c.error:
        return result(CID, Status.WARN, f"scxctl bench cannot run: {where}: {c.error}", _BUILD_HINT,
                      **details)
    if v.fresh is False:
        why = "has no build metadata" if c.info is None else (
            f"is stale: built from sources {_short(c.info.source_hash)}, "
            f"native/ is now {_short(v.sources_hash)}")
        return result(CID, Status.WARN, f"scxctl bench cannot run: {where} {why}",
                      "rebuild with: make -C native", **details)
    broken = _runs(str(c.path))
    if broken is not None:
        return result(CID, Status.WARN, f"scxctl bench cannot run: {where} does not start: {broken}",
                      "reinstall the scxctl package, or rebuild with: make -C native", **details)
    state = ", which matches the native/ sources" if v.fresh else ""
    return result(CID, Status.OK, f"using {where}{state}; it starts", **details)
