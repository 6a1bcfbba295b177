"""One guest run: build the run disk, boot QEMU, stream the command's output, map the outcome.

The guest reports over the virtio port scxvm.ctl (see guest/guest.sh); the kernel console (ttyS0)
is only watched for panics and kept for diagnostics. Outcome -> exit code:
the command's own code, or HarnessCode.TIMEOUT / PANIC / NO_COMMAND / SETUP (tools.vm.codes).

With a second command (RunSpec.then) QEMU boots twice: the root disk is then a per-run qcow2
overlay over the base image, so the second boot finds what the first command left behind, as after
a real reboot; the run disk (and /results on it) is the same for both boots.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from scxctl.log import get_logger
from tools.vm import accel, config, hang, image, kernel, qemu, rundisk, slots
from tools.vm.codes import HarnessCode, VMError

log = get_logger("tools.vm.run")

POLL_S = 0.05
PR_SET_PDEATHSIG = 1
OWNER = "owner.pid"  # in a run dir while its harness process runs
SHUTDOWN_GRACE_S = 30.0
# the first of two boots shuts down in order (every unit stopped, as on a real reboot): slower under TCG
REBOOT_GRACE_S = 180.0
_PANIC_RE = re.compile(r"Kernel panic - not syncing:?[^\n]*")
# Where a kernel report starts: what a reader of a CI log needs to tell a TCG flake from a real bug.
# An oops first; a WARNING only when there is none (an earlier, harmless one must not crowd it out).
_OOPS_RES = (re.compile(r"BUG:|Oops|general protection fault"), re.compile(r"WARNING:|RIP:"))
PANIC_EXCERPT_LINES = 40
HANG_PRINT_S = 15.0  # the most a timed-out guest gets to print its backtraces (tools.vm.hang)
# what of that the failure message shows: its start, where SysRq's headers and each CPU's backtrace
# come (the blocked tasks after them can run long); the harness's warning log has it all
HANG_PRINT_LINES = 150


@dataclass
class RunSpec:
    command: str
    timeout: float = 300.0  # for the command, from the moment the guest starts it
    boot_timeout: float | None = None  # boot to command; None: 60 s under KVM, 300 s under TCG
    systemd: bool = False
    cpus: int = 2
    mem: str = "2G"
    copies: list[rundisk.Copy] = field(default_factory=list)
    results: Path | None = None
    keep: bool = False  # keep the work dir (logs, run disk) for debugging
    tcg_single: bool = False  # single-threaded TCG (qemu.accel_args says when and why)
    icount: int | None = None  # instruction-counted guest time (qemu.accel_args); single-threaded TCG
    kernel: str | None = None  # a version spec (kernel.prepare); None: the default kernel
    flavour: str = image.DEFAULT  # image.INSTALLED: the bare image, no working tree in the guest
    then: str | None = None  # a second command, run by a second boot of the same root disk
    then_kernel: str | None = None  # the second boot's kernel (a version spec); None: the first's
    headers: bool = False  # the kernel's headers in the guest (for bcc), fetched once per kernel

    @property
    def one_host_thread(self) -> bool:
        """Whether TCG runs every vCPU on one host thread: asked for, or needed by icount."""
        return self.tcg_single or self.icount is not None


@dataclass
class Outcome:
    returncode: int
    output: bytes
    message: str | None  # why the harness failed, None when the command ran to its end
    accel: str
    boot_s: float | None  # QEMU start to the command start
    wall_s: float  # the whole run, disk building and result fetching included
    console: str
    workdir: Path | None = None
    qemu_s: float | None = None  # how long QEMU ran (both boots together when there were two)
    queued_s: float = 0.0  # waiting for host cores held by other guests (tools.vm.slots)
    second_boot_s: float | None = None  # second QEMU start to the second command's start (RunSpec.then)


@dataclass
class _Watch:
    """What the host has seen of the guest so far (pure state, fed by the poll loop)."""

    nonce: str
    started_at: float | None = None
    exit_code: int | None = None
    error: str | None = None
    panic: str | None = None
    _ctl_buf: str = ""

    def feed_ctl(self, text: str, now: float) -> None:
        self._ctl_buf += text
        *lines, self._ctl_buf = self._ctl_buf.split("\n")
        prefix = f"SCXVM:{self.nonce}:"
        for line in lines:
            line = line.strip()
            if not line.startswith(prefix):
                continue
            what = line[len(prefix):]
            if what == "start":
                self.started_at = now
            elif what.startswith("exit="):
                try:
                    self.exit_code = int(what[5:])
                except ValueError:
                    self.error = f"bad exit marker {line!r}"
            elif what.startswith("error="):
                self.error = what[6:]

    def feed_console(self, console_tail: str) -> None:
        if self.panic is None and (m := _PANIC_RE.search(console_tail)):
            self.panic = m.group(0).strip()


def panic_excerpt(console: str) -> str:
    """The kernel's report from its first line (or the console's last lines when none is marked)."""
    lines = console.strip().splitlines()
    starts = (next((i for i, line in enumerate(lines) if rx.search(line)), None) for rx in _OOPS_RES)
    start = next((i for i in starts if i is not None), max(0, len(lines) - PANIC_EXCERPT_LINES))
    excerpt = lines[start:start + PANIC_EXCERPT_LINES]
    last = next((line for line in reversed(lines) if _PANIC_RE.search(line)), None)
    if last is not None and last not in excerpt:
        excerpt += ["...", last]
    return "\n".join(excerpt)


def classify(w: _Watch, timed_out: str | None) -> tuple[int, str | None]:
    """Map what was seen to (exit code, harness message); message None means a normal exit."""
    if w.panic is not None:
        return HarnessCode.PANIC, f"guest kernel panic: {w.panic}"
    if timed_out == "command":
        return HarnessCode.TIMEOUT, "guest command timed out"
    if w.exit_code is not None:
        return w.exit_code, None
    if w.error is not None:
        return HarnessCode.NO_COMMAND, f"guest could not set up the command: {w.error}"
    if timed_out == "boot":
        return HarnessCode.NO_COMMAND, "guest never reached the command (boot timeout)"
    if w.started_at is None:
        return HarnessCode.NO_COMMAND, "guest never reached the command (QEMU exited during boot)"
    return HarnessCode.NO_COMMAND, "guest stopped before the command finished (no exit status)"


class _Tail:
    """Reads what was appended to a file since the last call (through one open file handle)."""

    def __init__(self, path: Path) -> None:
        self._f = open(path, "rb")  # noqa: SIM115 -- lives as long as the run; close() below

    def read(self) -> bytes:
        return self._f.read()

    def close(self) -> None:
        self._f.close()


def _prepare(version: str | None, flavour: str = image.DEFAULT) -> tuple[kernel.KernelInfo, Path, str]:
    binary = qemu.qemu_binary()
    info = (kernel.current() if version is None else None) or kernel.prepare(version)
    img = image.current(flavour) or image.build(flavour=flavour)
    return info, img, binary


def root_overlay(base: Path, work: Path) -> Path:
    """A qcow2 overlay over `base` in `work`: the guest's writes survive a reboot, `base` stays as it is.

    The overlay backs onto a hard link of the base image where one can be made, so that an image
    rebuild that deletes the old image between the two boots cannot pull the disk away.
    """
    backing = base
    link = work / "base.img"
    try:
        os.link(base, link)
        backing = link
    except OSError:
        pass  # another file system: the base image's own path
    overlay = work / "root.qcow2"
    cmd = ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(backing.resolve()), str(overlay)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise VMError("qemu-img not found", hint="install qemu-utils (scripts/install.sh)") from None
    if proc.returncode != 0:
        raise VMError(f"qemu-img create (root overlay) failed: {proc.stderr.strip()[-300:]}")
    return overlay


def reboots(first: Outcome) -> bool:
    """Whether a second command runs after `first`: only when the first command ran and exited 0."""
    return first.message is None and first.returncode == 0


def merge(first: Outcome, second: Outcome) -> Outcome:
    """One outcome for both boots: the second command's code and message, both outputs and consoles."""
    return Outcome(
        returncode=second.returncode,
        output=first.output + second.output,
        message=second.message,
        accel=second.accel,
        boot_s=first.boot_s,
        wall_s=second.wall_s,
        console=first.console + second.console,
        workdir=second.workdir,
        qemu_s=None if first.qemu_s is None or second.qemu_s is None else first.qemu_s + second.qemu_s,
        second_boot_s=second.boot_s,
    )


def second_machine(m: qemu.Machine, work: Path) -> qemu.Machine:
    """The second boot's machine: the same disks, its own log files (the first boot's stay for --keep)."""
    return dataclasses.replace(
        m, console_log=work / "console2.log", ctl_log=work / "ctl2.log", out_log=work / "out2.log",
        qmp_socket=_socket(work / "qmp2.sock"),
    )


def run(spec: RunSpec, sink: BinaryIO | None = None) -> Outcome:
    """Boot, run spec.command, stream its output to `sink` (stdout by default), return the outcome."""
    t0 = time.monotonic()
    sink = sink if sink is not None else sys.stdout.buffer
    info, root_img, binary = _prepare(spec.kernel, spec.flavour)
    # instruction counting exists only in TCG: a guest asked for it never gets KVM's wall clock
    acc = "kvm" if spec.icount is None and accel.choose(binary, kernel.vmlinuz(info)).kvm else "tcg"
    boot_timeout = spec.boot_timeout or (60.0 if acc == "kvm" else 300.0)
    runs = config.cache_dir() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    _reap_stale_runs(runs)
    work = Path(tempfile.mkdtemp(dir=runs, prefix="run-"))
    (work / OWNER).write_text(f"{os.getpid()}\n")
    # the second boot may boot another kernel of the same disk, as an upgrade or a downgrade would
    info2 = kernel.prepare(spec.then_kernel) if spec.then is not None and spec.then_kernel else info
    try:
        nonce = rundisk.stage(
            work / "stage", spec.command, spec.copies, kernel.lib_modules_dir(info), info.release,
            then=spec.then, project=spec.flavour == image.DEFAULT,
            headers=kernel.prepare_headers(info) if spec.headers else None,
            second_kernel=None if info2 is info else (kernel.lib_modules_dir(info2), info2.release),
        )  # fmt: skip
        run_img = work / "run.img"
        rundisk.make(work / "stage", run_img)
        shutil.rmtree(work / "stage")
        persistent = spec.then is not None
        root = root_overlay(root_img, work) if persistent else root_img
        m = qemu.Machine(
            kernel=kernel.boot_image(info), root_image=root, run_image=run_img,
            console_log=work / "console.log", ctl_log=work / "ctl.log", out_log=work / "out.log",
            accel=acc, cpus=spec.cpus, mem=spec.mem, systemd=spec.systemd, tcg_single=spec.one_host_thread,
            icount=spec.icount, persistent_root=persistent, qmp_socket=_socket(work / "qmp.sock"),
        )  # fmt: skip
        for p in (m.console_log, m.ctl_log, m.out_log):
            p.touch()
        # A core per vCPU thread (tools.vm.slots): a guest waits for its cores, then has them to
        # itself. Timeouts start once they are held.
        queued = time.monotonic()
        total = slots.host_slots()
        need = slots.needed(spec.cpus, acc == "tcg" and spec.one_host_thread, total)
        with slots.held(config.cache_dir(), need, total) as waited:
            log.info("booting guest", accel=acc, cpus=spec.cpus, mem=spec.mem, systemd=spec.systemd,
                     kernel=info.release, flavour=spec.flavour, host_cores=f"{need}/{total}",
                     waited=waited)
            queued = time.monotonic() - queued
            # the lock stays held across a reboot: the second boot's timing is as comparable as the first's
            outcome = _boots(m, binary, nonce, spec, boot_timeout, sink, work, t0, kernel.boot_image(info2))
        outcome.queued_s = queued
        if spec.results is not None and outcome.returncode not in (HarnessCode.NO_COMMAND,):
            try:
                rundisk.fetch_results(run_img, spec.results, work / "fetched")
            except VMError as exc:
                log.warning("results not fetched", error=str(exc))
        outcome.wall_s = time.monotonic() - t0
        return outcome
    finally:
        if spec.keep:
            (work / OWNER).unlink(missing_ok=True)  # kept dirs are never reaped
            log.info("kept the run directory", path=str(work))
        else:
            shutil.rmtree(work, ignore_errors=True)


def _boots(
    m: qemu.Machine, binary: str, nonce: str, spec: RunSpec, boot_timeout: float, sink: BinaryIO,
    work: Path, t0: float, second_kernel: Path,
) -> Outcome:  # fmt: skip
    """The run's one boot, or two (spec.then) when the first command exits 0; the second boots
    `second_kernel`."""
    if spec.then is None:
        return _boot(m, binary, nonce, spec, boot_timeout, sink, work, t0)
    first = _boot(m, binary, nonce, spec, boot_timeout, sink, work, t0, grace=REBOOT_GRACE_S)
    if not reboots(first):
        log.warning("the first command did not succeed: no second boot", code=first.returncode)
        return first
    log.info("rebooting the guest for the second command")
    m2 = dataclasses.replace(second_machine(m, work), kernel=second_kernel)
    for p in (m2.console_log, m2.ctl_log, m2.out_log):
        p.touch()
    second = _boot(m2, binary, nonce, spec, boot_timeout, sink, work, t0, stderr_name="qemu2.stderr")
    return merge(first, second)


def _boot(
    m: qemu.Machine, binary: str, nonce: str, spec: RunSpec, boot_timeout: float, sink: BinaryIO,
    work: Path, t0: float, grace: float = SHUTDOWN_GRACE_S, stderr_name: str = "qemu.stderr",
) -> Outcome:  # fmt: skip
    out, ctl, con = _Tail(m.out_log), _Tail(m.ctl_log), _Tail(m.console_log)
    watch = _Watch(nonce)
    console = ""
    output = bytearray()
    qemu_err = open(work / stderr_name, "wb")  # noqa: SIM115 -- closed below, after the process
    started = time.monotonic()
    proc = subprocess.Popen(
        qemu.argv(m, binary), stdin=subprocess.DEVNULL, stdout=qemu_err, stderr=qemu_err,
        preexec_fn=_die_with_parent,
    )  # fmt: skip
    timed_out: str | None = None
    finished_at: float | None = None
    hang_text = ""
    try:
        while True:
            exited = proc.poll() is not None
            now = time.monotonic()
            data = out.read()
            if data:
                output += data
                sink.write(data)
                sink.flush()
            watch.feed_ctl(ctl.read().decode(errors="replace"), now)
            new = con.read().decode(errors="replace")
            if new:
                console += new
                watch.feed_console(console[-(len(new) + 200):])
            if finished_at is None and (watch.exit_code is not None or watch.error is not None):
                finished_at = now
            if exited or watch.panic is not None:
                break
            if finished_at is not None:
                if now - finished_at > grace:
                    log.warning("guest did not power off after the command; killing QEMU")
                    break
            elif watch.started_at is None and now - started > boot_timeout:
                timed_out = "boot"
                break
            elif watch.started_at is not None and now - watch.started_at > spec.timeout:
                timed_out = "command"
                break
            time.sleep(POLL_S)
        if timed_out is not None and proc.poll() is None:
            hang_text, printed = _ask_hung_guest(m, con)
            console += printed
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        qemu_err.close()
    data = out.read()  # whatever arrived between the last poll and the end
    if data:
        output += data
        sink.write(data)
        sink.flush()
    for tail in (out, ctl, con):
        tail.close()
    if watch.exit_code is None and watch.started_at is not None and timed_out is None and watch.panic is None:
        watch.exit_code = rundisk.read_exitcode(m.run_image)  # the marker got lost, the disk may have it
    code, message = classify(watch, timed_out)
    if message is not None:
        limit = spec.timeout if timed_out == "command" else boot_timeout
        qemu_stderr = (work / stderr_name).read_text(errors="replace").strip()
        message = _explained(message, code, timed_out, limit, console, qemu_stderr, hang_text)
    boot_s = (watch.started_at - started) if watch.started_at is not None else None
    log.info(
        "guest finished", code=int(code), boot_s=_r(boot_s), command_s=_r(finished_at, watch.started_at),
        qemu_s=_r(time.monotonic() - started),
    )  # fmt: skip
    return Outcome(int(code), bytes(output), message, m.accel, boot_s, time.monotonic() - t0, console,
                   work if spec.keep else None, qemu_s=time.monotonic() - started)


def _explained(
    message: str, code: int, timed_out: str | None, limit: float, console: str, qemu_stderr: str,
    hang_text: str,
) -> str:  # fmt: skip
    """A failed run's message with what tells why: the limit it ran into, a panic's excerpt (the
    test's failure message shows it) or the console's last lines (logged), where a hang was."""
    if code == HarnessCode.TIMEOUT or (code == HarnessCode.NO_COMMAND and timed_out == "boot"):
        message += f" after {limit:g} s"
    if code == HarnessCode.PANIC:
        message += "\n" + panic_excerpt(console)
    elif code != HarnessCode.TIMEOUT:
        tail = "\n".join(console.strip().splitlines()[-15:])
        log.error("guest console (last lines)", console=tail, qemu_stderr=qemu_stderr[-500:])
    if hang_text:
        message += "\n" + hang_text
    return message


def _socket(path: Path) -> Path | None:
    """`path` when a unix socket can have it (sun_path: 108 bytes); else the run has no monitor."""
    return path if len(os.fsencode(path)) < 108 else None


def _ask_hung_guest(m: qemu.Machine, con: _Tail) -> tuple[str, str]:
    """(tools.vm.hang's report on a guest that timed out, with what the guest printed for it; the
    printed text alone, for the console the outcome keeps)."""
    if m.qmp_socket is None:
        return "", ""
    text = hang.report(m.qmp_socket)
    printed = ""
    deadline = time.monotonic() + HANG_PRINT_S
    quiet_since = time.monotonic()
    # the backtraces take a while to print under TCG: read until the console has been quiet a second
    while time.monotonic() < deadline and (not printed or time.monotonic() - quiet_since < 1.0):
        new = con.read().decode(errors="replace")
        if new:
            printed += new
            quiet_since = time.monotonic()
        time.sleep(POLL_S)
    log.warning("asked the hung guest what it does", report=text, console_lines=printed.count("\n"),
                printed=printed)
    head = "hang report (vCPU instruction pointers, then SysRq 8, l and w)"
    return f"{head}:\n{text}\n{hang_printed(printed)}", printed


def hang_printed(printed: str) -> str:
    """The first HANG_PRINT_LINES lines of what a hung guest printed for SysRq, and how many more."""
    lines = printed.strip().splitlines()
    shown = "\n".join(lines[:HANG_PRINT_LINES])
    more = len(lines) - HANG_PRINT_LINES
    return f"{shown}\n[{more} more lines in the harness's warning log]" if more > 0 else shown


def _reap_stale_runs(runs: Path) -> None:
    """Delete run dirs left by harness processes that were killed (their owner pid is gone)."""
    for d in runs.glob("run-*"):
        try:
            pid = int((d / OWNER).read_text())
        except (OSError, ValueError):
            continue  # a --keep dir, or one being created right now
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            pass


def _die_with_parent() -> None:
    """In the QEMU child: get SIGKILL when the harness dies (killed by timeout(1), pytest-timeout...)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _r(a: float | None, b: float | None = 0.0) -> float | None:
    return None if a is None or b is None else round(a - b, 1)
