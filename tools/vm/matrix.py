"""`python -m tools.vm matrix`: pyland on each installable Debian kernel, one guest per kernel.

sched_ext's kfuncs and verifier rules change between kernel series, so an object that loads on the
default guest kernel may be refused by one a user runs. Each guest records what `scxctl doctor`
predicts (its bpf.object check trial-loads the object) and what really happens: `scxctl run`
attaching, surviving a stress mix and detaching on SIGTERM, then the fairness bench. A kernel passes
when pyland works there and doctor's verdict agreed with whether `scxctl run` attached; the
fairness metric is reported, not judged (TCG timing says little about a scheduler's fairness).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scxctl.fsutil import atomic_write_text
from scxctl.log import get_logger
from tools.vm import config, kernel
from tools.vm.api import VM, VMResult
from tools.vm.codes import VMError

log = get_logger("tools.vm.matrix")

GUEST_TIMEOUT_S = 600.0
ATTACH_S = 90  # TCG guests take 20-40 s from `scxctl run` to an enabled scheduler
GUEST_PATH = "/tmp/scxvm-matrix.sh"
ERROR_PREFIX = "scxctl: error:"
CELL_WIDTH = 60  # the table's longest cell; --json keeps the whole text

# Every step writes its findings under /results for parse_results; a step that cannot start (the
# scheduler never attached) leaves its files out rather than guessing. Builtins and few execs: under
# TCG each process start costs tens of milliseconds.
GUEST_SCRIPT = rf"""#!/bin/bash
set -u
R=/results
SX=/sys/kernel/sched_ext
cd /opt/scxctl
state() {{ cat $SX/state 2>/dev/null || echo none; }}
ops() {{ cat $SX/root/ops 2>/dev/null || echo none; }}
alive() {{ kill -0 "$1" 2>/dev/null; }}
stop() {{  # SIGTERM, SIGKILL after 30 s; prints the exit status (never called in a subshell: it waits)
    kill -TERM "$1" 2>/dev/null
    for _ in $(seq 1 150); do alive "$1" || break; sleep 0.2; done
    kill -KILL "$1" 2>/dev/null
    wait "$1"
    echo $?
}}
wait_disabled() {{
    for _ in $(seq 1 150); do [ "$(state)" = disabled ] && return 0; sleep 0.2; done
    return 1
}}

uname -r >"$R/uname.txt"
timeout 300 scxctl doctor --json >"$R/doctor.json" 2>"$R/doctor.err"
echo $? >"$R/doctor.rc"

scxctl --log-format json run --stats-interval 5 >"$R/run.log" 2>&1 &
pid=$!
t0=$SECONDS
attached=no
while [ $((SECONDS - t0)) -lt {ATTACH_S} ]; do
    if [ "$(state)" = enabled ] && [ "$(ops)" = pyland ]; then attached=yes; break; fi
    alive $pid || break
    sleep 0.2
done
echo "$attached $((SECONDS - t0))" >"$R/attach.txt"

if [ $attached = no ]; then
    if alive $pid; then
        echo "not enabled after {ATTACH_S} s" >"$R/attach_timeout.txt"
        stop $pid >"$R/run.rc"
    else
        wait $pid
        echo $? >"$R/run.rc"
    fi
else
    stress-ng --cpu 2 --fork 1 --futex 1 --sleep 2 --pipe 1 --timeout 30s --metrics-brief \
        >"$R/stress.txt" 2>&1
    echo $? >"$R/stress.rc"
    echo "$(state) $(ops)" >"$R/after_stress.txt"
    if alive $pid; then
        stop $pid >"$R/sigterm.rc"
    else
        wait $pid
        echo $? >"$R/run.rc"
    fi
    wait_disabled
    state >"$R/after_stop.txt"
    timeout 300 scxctl bench fairness --scheduler pyland --min-time 2 --max-time 4 --start-timeout 90 \
        --quiet --json --output "$R/fairness.json" >"$R/fairness.out" 2>"$R/fairness.err"
    echo $? >"$R/fairness.rc"
fi
dmesg | grep -iE 'sched_ext|pyland' | tail -n 40 >"$R/dmesg.txt" 2>&1
exit 0
"""


@dataclass
class Row:
    """What one guest found on one kernel (the JSON row; the table cells derive from it)."""

    kernel: str  # the ABI asked for, e.g. 7.3.4+deb13
    release: str | None = None  # `uname -r` in the guest
    harness: str | None = None  # why the guest gave no (complete) result: timeout, panic...
    bpf_object_status: str | None = None
    bpf_object_reason: str | None = None  # the load error, or what the check found
    bpf_object_loaded: bool | None = None  # the trial load: True/False, None when not tried
    verdict_status: str | None = None
    verdict_finding: str | None = None
    doctor_says_runs: bool | None = None  # the verdict's can_run_pyland
    attached: bool | None = None  # state enabled and root/ops pyland within ATTACH_S
    attach_s: int | None = None
    attach_timeout: bool = False  # still running but not enabled after ATTACH_S: stopped by the script
    run_rc: int | None = None  # `scxctl run`'s exit status when it ended before the SIGTERM
    run_error: str | None = None  # its last `scxctl: error:` line
    stress_rc: int | None = None
    after_stress: str | None = None  # "<state> <ops>" right after the stress mix
    sigterm_rc: int | None = None
    state_after_stop: str | None = None
    fairness_rc: int | None = None
    fairness_status: str | None = None  # pass/fail/unreliable/invalid/error
    fairness_metric: float | None = None
    fairness_error: str | None = None
    boots: int = 1
    tcg_single: bool = False

    @property
    def stress_ok(self) -> bool | None:
        if not self.attached:
            return None
        return self.stress_rc == 0 and self.after_stress == "enabled pyland" and self.run_rc is None

    @property
    def stopped_cleanly(self) -> bool:
        return self.sigterm_rc == 0 and self.state_after_stop == "disabled"

    @property
    def works(self) -> bool:
        """pyland attached, survived the stress mix and detached on SIGTERM."""
        return bool(self.attached and self.stress_ok and self.stopped_cleanly)

    @property
    def agrees(self) -> bool | None:
        """Did doctor predict whether `scxctl run` attaches? None when either side is unknown.

        Attaching is what doctor can predict (the object loads, the kernel has what pyland needs); a
        stall under load is the stress column's business.
        """
        if self.doctor_says_runs is None or self.attached is None:
            return None
        return self.doctor_says_runs == self.attached

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "stress_ok": self.stress_ok, "works": self.works, "agrees": self.agrees,
                "cells": dict(zip(COLUMNS, cells(self), strict=True))}


def _text(results: Path, name: str) -> str | None:
    try:
        return (results / name).read_text(errors="replace").strip()
    except OSError:
        return None


def _int(results: Path, name: str) -> int | None:
    text = _text(results, name)
    try:
        return int(text) if text else None
    except ValueError:
        return None


def last_error(log_text: str) -> str | None:
    """The scheduler's last one-line error (`scxctl: error: ...`), without the prefix."""
    lines = [ln for ln in log_text.splitlines() if ln.startswith(ERROR_PREFIX)]
    return lines[-1].removeprefix(ERROR_PREFIX).strip() if lines else None


def _doctor(row: Row, results: Path) -> None:
    try:
        checks = {c["id"]: c for c in json.loads(_text(results, "doctor.json") or "")["checks"]}
    except (ValueError, KeyError, TypeError):
        return
    obj, verdict = checks.get("bpf.object"), checks.get("verdict")
    if obj is not None:
        load = obj.get("details", {}).get("load") or {}
        row.bpf_object_status = obj.get("status")
        if load.get("attempted"):
            row.bpf_object_loaded = bool(load.get("ok"))
        if load.get("attempted") and not load.get("ok"):
            row.bpf_object_reason = load.get("error")
        elif load.get("attempted"):
            row.bpf_object_reason = "loaded" if obj.get("status") == "ok" else obj.get("finding")
        elif load.get("reason"):
            row.bpf_object_reason = f"load not tried: {load['reason']}"
        else:
            row.bpf_object_reason = obj.get("finding")
    if verdict is not None:
        row.verdict_status = verdict.get("status")
        row.verdict_finding = verdict.get("finding")
        says = verdict.get("details", {}).get("can_run_pyland")
        row.doctor_says_runs = says if isinstance(says, bool) else verdict.get("status") != "fail"


def _fairness(row: Row, results: Path) -> None:
    row.fairness_rc = _int(results, "fairness.rc")
    try:
        report = json.loads(_text(results, "fairness.json") or "")
        test = report["runs"][0]["tests"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        if row.fairness_rc is not None:
            err = (_text(results, "fairness.err") or "").splitlines()
            row.fairness_error = last_error("\n".join(err)) or (err[-1] if err else None)
        return
    row.fairness_status = test.get("status")
    row.fairness_metric = test.get("metric")
    row.fairness_error = test.get("error") or report["runs"][0].get("invalid_reason")


def parse_results(abi: str, results: Path, harness: str | None = None) -> Row:
    """A row from what the guest script left under /results (absent files: that step never ran)."""
    row = Row(kernel=abi, harness=harness, release=_text(results, "uname.txt") or None)
    _doctor(row, results)
    attach = (_text(results, "attach.txt") or "").split()
    if len(attach) == 2:
        row.attached = attach[0] == "yes"
        row.attach_s = int(attach[1]) if attach[1].isdigit() else None
    row.run_rc = _int(results, "run.rc")
    row.attach_timeout = (results / "attach_timeout.txt").exists()
    row.run_error = last_error(_text(results, "run.log") or "")
    row.stress_rc = _int(results, "stress.rc")
    row.after_stress = _text(results, "after_stress.txt")
    row.sigterm_rc = _int(results, "sigterm.rc")
    row.state_after_stop = _text(results, "after_stop.txt")
    if row.attached:
        _fairness(row, results)
    return row


def _short(text: str | None, width: int = CELL_WIDTH) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 3] + "..."


COLUMNS = ("kernel", "doctor bpf.object", "run", "stress 30 s", "SIGTERM", "fairness", "agrees")


def cells(row: Row) -> list[str]:
    """The table's cells for one row, in COLUMNS order."""
    kernel_cell = row.release.removesuffix(f"-{config.KERNEL_FLAVOUR}") if row.release else row.kernel
    doctor = row.bpf_object_status or "-"
    if row.bpf_object_status is not None and row.bpf_object_reason:
        doctor += f": {row.bpf_object_reason}"
    if row.attached is None:
        run = f"guest: {row.harness}" if row.harness else "-"
    elif row.attached:
        run = "runs" if row.attach_s is None else f"runs (enabled in {row.attach_s} s)"
    elif row.attach_timeout:
        run = f"not enabled in {ATTACH_S} s (stopped: exit {row.run_rc})"
    else:
        run = f"exit {row.run_rc}" + (f": {row.run_error}" if row.run_error else "")
    if not row.attached:
        stress = "-"
    elif row.stress_ok:
        stress = "ok"
    elif row.run_rc is not None or row.after_stress != "enabled pyland":
        stress = "ejected" + (f": {row.run_error}" if row.run_error and row.run_rc is not None else "")
    else:
        stress = f"stress-ng exit {row.stress_rc}"
    sigterm = "-" if row.sigterm_rc is None else f"rc {row.sigterm_rc}, {row.state_after_stop or '?'}"
    if row.fairness_metric is not None:
        fairness = f"{row.fairness_metric:.2f} {row.fairness_status}"
    elif row.fairness_status is not None or row.fairness_rc is not None:
        fairness = f"{row.fairness_status or f'exit {row.fairness_rc}'}" + (
            f": {row.fairness_error}" if row.fairness_error else "")
    else:
        fairness = "-"
    agrees = {True: "yes", False: "NO", None: "-"}[row.agrees]
    return [kernel_cell, doctor, run, stress, sigterm, fairness, agrees]


def render(rows: Sequence[Row]) -> str:
    """Plain aligned text: readable in a terminal and a CI log alike (no wrapping at 80 columns)."""
    table = [list(COLUMNS), *([_short(c) for c in cells(r)] for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    fmt = [" | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table]
    fmt.insert(1, "-+-".join("-" * w for w in widths))
    notes = [f"{r.kernel}: guest: {r.harness}" for r in rows if r.harness and r.attached is not None]
    return "\n".join(fmt + notes)


def passed(rows: Sequence[Row]) -> bool:
    """Exit 0 only when pyland works on every kernel and doctor agreed on each."""
    return bool(rows) and all(r.works and r.agrees is True for r in rows)


def select(
    offered: Sequence[str], specs: Sequence[str] | None, newest_per_series: bool, cached: Sequence[str] = ()
) -> list[str]:
    """The ABIs to test, newest first: every offered one, or those the specs match.

    `offered` and `cached` are ABIs, newest first. A spec is a series (`7.2`: all its kernels) or one
    kernel (`7.2.12`); a spec no offered kernel matches may name a cached one the archive has dropped.
    Raises ValueError naming a spec that matches nothing.
    """
    if specs is None:
        picked = list(offered)
    else:
        picked = []
        for spec in specs:
            hits = [a for a in offered if kernel.matches(spec, a)]
            hits = hits or [a for a in cached if kernel.matches(spec, a)]
            if not hits:
                raise ValueError(f"no installable kernel matches {spec!r} "
                                 "(list them: python -m tools.vm kernel --list)")
            picked += [a for a in hits if a not in picked]
        order = [*offered, *(a for a in cached if a not in offered)]
        picked.sort(key=order.index)
    if newest_per_series:  # picked is newest first, so the first of each series is its newest
        newest: dict[str, str] = {}
        for abi in picked:
            newest.setdefault(kernel.series(abi), abi)
        picked = list(newest.values())
    return picked


def boot(abi: str, workdir: Path) -> Row:
    """One guest on kernel `abi`; its /results are kept under workdir/<abi>/."""
    script = workdir / "matrix.sh"
    if not script.exists():
        script.write_text(GUEST_SCRIPT)
    base = workdir / abi
    base.mkdir(parents=True, exist_ok=True)
    n = iter(range(1, 100))
    vm = VM(lambda: Path(tempfile.mkdtemp(dir=base, prefix=f"boot{next(n)}-")))
    try:
        res: VMResult = vm.run(f"bash {GUEST_PATH}", timeout=GUEST_TIMEOUT_S, kernel=abi,
                               copy=[(str(script), GUEST_PATH)])
    except VMError as exc:  # this kernel could not be prepared: the other kernels still run
        return Row(kernel=abi, harness=exc.message)
    harness = res.message if res.message is not None else (
        None if res.returncode == 0 else f"guest script exited {res.returncode}")
    row = parse_results(abi, res.results, harness)
    row.boots, row.tcg_single = res.boots, res.tcg_single
    return row


def build_object() -> None:
    """The pyland object the guests load, from the working tree's bpf/ (doctor refuses a stale one)."""
    proc = subprocess.run(["make", "-s", "-C", str(config.CHECKOUT / "bpf"), "build/pyland.bpf.o"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise VMError(f"make -C bpf failed: {proc.stderr.strip()[-400:]}", hint="or pass --no-build")


def run_matrix(abis: Sequence[str], workdir: Path, on_row: Callable[[Row], None] | None = None) -> list[Row]:
    """One guest per kernel, in turn (each guest with a thread per vCPU has the host to itself anyway)."""
    rows = []
    for i, abi in enumerate(abis, 1):
        log.info("matrix guest", kernel=abi, n=f"{i}/{len(abis)}")
        row = boot(abi, workdir)
        log.info("matrix kernel done", kernel=abi, works=row.works, agrees=row.agrees)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows


def write_json(path: Path, rows: Sequence[Row]) -> None:
    data = {"schema": "tools.vm.matrix/1", "ok": passed(rows), "rows": [r.to_json() for r in rows]}
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
