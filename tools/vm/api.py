"""The Python API the tests use (through the `vm` fixture in tests/conftest.py)."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from scxctl.log import get_logger
from tools.vm import image, runner
from tools.vm.codes import HarnessCode
from tools.vm.rundisk import Copy

log = get_logger("tools.vm.api")

PANIC_ATTEMPTS = 3  # boots per run when the guest kernel panics (see VM.run)
# boots when every panic was the stale-patch flake: an int3 that text patching left behind, which no
# bug of ours can produce ("Oops: int3"); it ended all three boots of one CI run of the bench test
PATCH_FLAKE_ATTEMPTS = 5
PATCH_FLAKE = "Oops: int3"
# a report that points into a BPF program or into sched_ext itself (a frame or a WARN location) is
# ours to fix: retrying it could hide the bug behind a lucky boot
OUR_PANIC = re.compile(r"\bbpf_prog_[0-9a-f]+\w*\+0x|\bscx_\w+\+0x|kernel/sched/ext\.c|\b\w*_scx_\w*\+0x")


@dataclass(frozen=True)
class RetriedBoot:
    """A boot that panicked, or hung before its command, and was run again: the test summary
    lists every one."""

    who: str  # the caller's context (the test that booted it)
    attempt: int
    report: str  # the harness's message and the report's Oops/BUG and RIP lines


def panic_summary(message: str | None) -> str:
    lines = (message or "").splitlines()
    keep = lines[:1] + [ln.strip() for ln in lines[1:] if re.search(r"Oops:|BUG:|RIP:", ln)][:2]
    return " | ".join(keep)


RETRIED: list[RetriedBoot] = []  # this process's retried boots, in order


@dataclass(frozen=True)
class GuestRun:
    """One VM.run as the test summary lists it: where a suite's time went, boot by boot."""

    who: str  # the caller's context (the test that booted it)
    started: float  # time.time() when run() was called
    wall_s: float  # the whole run: disk building, queueing for cores, every boot, fetching results
    queued_s: float  # of which waiting for host cores held by other guests
    slots: int  # host cores it held (1: single-threaded TCG)


RUNS: list[GuestRun] = []  # this process's guest runs, in order


def boot_hang_is_retried(spec: runner.RunSpec, out: runner.Outcome) -> bool:
    """A light guest that timed out before its command ran nothing of ours (the kernel booting,
    then the harness's own init), so a fresh boot is fair: once. A systemd boot may be starting
    the installed scxctl, whose hang would be ours, and a second boot's hang may be the first
    command's doing: neither is retried."""
    hung = out.returncode == HarnessCode.NO_COMMAND and "(boot timeout)" in (out.message or "")
    return hung and not spec.systemd and spec.then is None


def panic_is_ours(message: str | None) -> bool:
    """Does the panic report point into a BPF program or sched_ext, and not at the patching flake?"""
    text = message or ""
    return PATCH_FLAKE not in text and OUR_PANIC.search(text) is not None


@dataclass(frozen=True)
class VMResult:
    returncode: int  # the command's exit code, or a tools.vm.codes.HarnessCode
    output: str  # the guest command's stdout and stderr, interleaved as written
    results: Path  # host directory holding what the guest wrote under /results
    wall_s: float
    message: str | None = None  # harness failure (timeout, panic, ...); None when the command ran
    boot_s: float | None = None  # QEMU start to command start
    accel: str = "tcg"
    qemu_s: float | None = None  # how long QEMU ran (wall_s also counts disk building and queueing)
    queued_s: float = 0.0  # waiting for host cores other guests held (tools.vm.slots)
    boots: int = 1  # 1 + the retries after guest kernel panics
    tcg_single: bool = False  # the boot that gave this result ran single-threaded TCG
    kernel: str | None = None  # the version spec the guest booted (None: the default kernel)
    second_boot_s: float | None = None  # `then` runs: the second QEMU start to the second command


class VM:
    """Runs each command in a fresh guest; the base image is never modified by a run."""

    def __init__(
        self,
        results_dir: Callable[[], Path],
        context: Callable[[], str] = lambda: "",
        single: Callable[[], bool] = lambda: False,
    ) -> None:
        self._results_dir = results_dir
        self._context = context  # who is booting (the test's node id), for RETRIED
        self._single = single  # run()'s tcg_single when the caller does not say (the test's marker)

    def run(
        self,
        command: str,
        *,
        timeout: float = 300,
        systemd: bool = False,
        cpus: int = 2,
        mem: str = "2G",
        copy: Sequence[tuple[str, str]] = (),
        retry_on_panic: bool = True,
        tcg_single: bool | None = None,
        single_on_last_retry: bool = True,
        kernel: str | None = None,
        flavour: str = image.DEFAULT,
        then: str | None = None,
        then_kernel: str | None = None,
        headers: bool = False,
        icount: int | None = None,
    ) -> VMResult:
        """Run `command` in a fresh guest; a guest kernel panic gets up to PANIC_ATTEMPTS boots,
        PATCH_FLAKE_ATTEMPTS when every panic was the stale-patch flake, and none when the report
        points into a BPF program or sched_ext (panic_is_ours); a light guest that hung before its
        command gets one more boot (boot_hang_is_retried). Each retried boot is kept in RETRIED.

        `flavour="installed"` boots the bare image without the working tree (tools.vm.image);
        `then` is a second command, run after a reboot of the same root disk when `command` exits 0
        (the result's code is then the second command's), booting `then_kernel` when given (a
        version spec, as `kernel`). /results collects what both wrote.
        `headers`: the kernel's headers installed as linux-headers-RELEASE would (for bcc).
        `icount`: the guest's clock counts its instructions (qemu.accel_args), for rates that must
        not move with the host's load.

        Multi-threaded TCG now and then runs a stale copy of code the guest kernel is patching
        (qemu.accel_args). A fresh boot tells such a flake from a real bug, and the last boot runs
        single-threaded TCG, which cannot have that race: a panic there is not the flake. Callers
        whose results depend on vCPUs running in parallel (performance) pass
        `single_on_last_retry=False`. `tcg_single` unset: the VM's default (in the test suite, the
        test's `tcg_single` marker).
        """
        spec = runner.RunSpec(
            command=command,
            timeout=timeout,
            systemd=systemd,
            cpus=cpus,
            mem=mem,
            copies=[Copy(Path(src), dst) for src, dst in copy],
            results=self._results_dir(),
            tcg_single=self._single() if tcg_single is None else tcg_single,
            kernel=kernel,
            flavour=flavour,
            then=then,
            then_kernel=then_kernel,
            headers=headers,
            icount=icount,
        )
        started = time.time()
        out, boots = self._run_retrying_panics(spec, retry_on_panic, single_on_last_retry)
        if boot_hang_is_retried(spec, out):
            log.warning("guest hung before its command; retrying in a fresh guest", message=out.message)
            RETRIED.append(RetriedBoot(self._context(), boots, panic_summary(out.message)))
            spec.results = self._results_dir()
            out, more = self._run_retrying_panics(spec, retry_on_panic, single_on_last_retry)
            boots += more
        RUNS.append(GuestRun(self._context(), started, time.time() - started, out.queued_s,
                             1 if spec.one_host_thread else cpus))
        return VMResult(
            returncode=out.returncode,
            output=out.output.decode("utf-8", errors="replace"),
            results=spec.results,
            wall_s=out.wall_s,
            message=out.message,
            boot_s=out.boot_s,
            accel=out.accel,
            qemu_s=out.qemu_s,
            queued_s=out.queued_s,
            boots=boots,
            tcg_single=spec.one_host_thread,
            kernel=kernel,
            second_boot_s=out.second_boot_s,
        )

    def _run_retrying_panics(self, spec: runner.RunSpec, retry_on_panic: bool,
                             single_on_last_retry: bool) -> tuple[runner.Outcome, int]:
        """The run's outcome and how many boots it took (see run())."""
        out = runner.run(spec, sink=io.BytesIO())
        boots = 1
        only_flakes = True
        for attempt in range(2, PATCH_FLAKE_ATTEMPTS + 1):
            if out.returncode != HarnessCode.PANIC or panic_is_ours(out.message):
                break
            only_flakes = only_flakes and PATCH_FLAKE in (out.message or "")
            limit = (PATCH_FLAKE_ATTEMPTS if only_flakes else PANIC_ATTEMPTS) if retry_on_panic else 1
            if attempt > limit:
                break
            if attempt == limit and single_on_last_retry:
                spec.tcg_single = True
            log.warning("guest kernel panicked; retrying in a fresh guest", attempt=attempt,
                        tcg_single=spec.tcg_single, message=out.message)
            RETRIED.append(RetriedBoot(self._context(), attempt - 1, panic_summary(out.message)))
            spec.results = self._results_dir()
            out = runner.run(spec, sink=io.BytesIO())
            boots = attempt
        return out, boots
