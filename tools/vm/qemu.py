"""The QEMU command line for one guest boot (pure: no process is started here)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tools.vm.codes import VMError
from tools.vm.image import ROOT_PARTUUID

QEMU = "qemu-system-x86_64"
INIT = "/usr/local/sbin/scxvm-boot"


@dataclass(frozen=True)
class Machine:
    kernel: Path
    root_image: Path
    run_image: Path
    console_log: Path  # ttyS0: kernel messages, panics
    ctl_log: Path  # virtio port scxvm.ctl: start/exit markers
    out_log: Path  # virtio port scxvm.out: the command's stdout+stderr
    accel: str = "tcg"  # "kvm" or "tcg"
    cpus: int = 2
    mem: str = "2G"
    systemd: bool = False
    tcg_single: bool = False  # one host thread for all vCPUs (see accel_args)
    icount: int | None = None  # guest time counted in instructions, 2**icount ns each (see accel_args)
    # root_image is a per-run qcow2 overlay over the base image that keeps the guest's writes (for
    # a second boot of the same disk), instead of the raw base image with its writes thrown away
    persistent_root: bool = False
    qmp_socket: Path | None = None  # QEMU's monitor, for asking a hung guest what it does (tools.vm.hang)


def qemu_binary() -> str:
    path = shutil.which(QEMU)
    if path is None:
        raise VMError(f"{QEMU} not found", hint="install qemu-system-x86 (scripts/install.sh)")
    return path


def kernel_cmdline(systemd: bool) -> str:
    args = [
        f"root=PARTUUID={ROOT_PARTUUID}", "rw", "rootfstype=ext4", "rootwait=30",
        "console=ttyS0", "loglevel=4", "quiet", "panic=-1", "mitigations=off",
        "no_timer_check",  # the IO-APIC timer check panics TCG guests on a busy host
        "sysrq_always_enabled",  # the harness's hang report asks a stuck guest for its backtraces
    ]  # fmt: skip
    if systemd:
        args += ["scxvm.mode=systemd", "systemd.show_status=false"]
    else:
        args.append(f"init={INIT}")
    extra = os.environ.get("SCXCTL_VM_KERNEL_ARGS", "").split()  # debugging, e.g. "loglevel=7"
    if extra:
        args = [a for a in args if a != "quiet"] + extra
    return " ".join(args)


def accel_args(accel: str, tcg_single: bool = False, icount: int | None = None) -> list[str]:
    """KVM, or TCG with one host thread per vCPU (default) or one for all (`tcg_single`).

    Multi-threaded TCG now and then executes a stale copy of code the guest kernel is patching
    (an int3 left by text_poke_bp inside __schedule, a jump label in cgroup_move_task: "Oops: int3",
    "Fatal exception in interrupt"). sched_ext flips static keys on every enable and disable, so a
    test that switches schedulers many times meets it often; single-threaded TCG runs the vCPUs in
    turn and cannot. It is slower, and its vCPUs never run in parallel, so performance tests keep
    the default.

    `icount`: the guest's clock is driven by the instructions it executes (2**icount ns each) and
    jumps over idle time (sleep=off), so a rate the guest measures counts instructions and no longer
    depends on how fast or how loaded the host is. A comparison of two guest rates then resolves
    differences far below the host's noise; the price is single-threaded TCG (icount needs it).
    """
    if accel == "kvm":
        assert icount is None, "instruction counting needs TCG"
        return ["-accel", "kvm", "-cpu", "host"]
    if icount is not None:
        counted = f"shift={icount},sleep=off,align=off"
        return ["-accel", "tcg,thread=single", "-cpu", "max", "-icount", counted]
    return ["-accel", f"tcg,thread={'single' if tcg_single else 'multi'}", "-cpu", "max"]


def root_drive(m: Machine) -> str:
    """The root disk's -drive value: the base image is only ever read, whichever way."""
    if m.persistent_root:
        return f"file={m.root_image},if=none,id=root,format=qcow2"
    return f"file={m.root_image},if=none,id=root,format=raw,snapshot=on"


def argv(m: Machine, binary: str = QEMU) -> list[str]:
    def port(name: str, log: Path) -> list[str]:
        cid = name.replace(".", "_")
        return [
            "-chardev", f"file,id={cid},path={log}",
            "-device", f"virtserialport,bus=vser0.0,chardev={cid},name={name}",
        ]  # fmt: skip

    return [
        binary, "-name", "scxvm", "-machine", "q35", *accel_args(m.accel, m.tcg_single, m.icount),
        "-smp", str(m.cpus), "-m", m.mem,
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-kernel", str(m.kernel), "-append", kernel_cmdline(m.systemd),
        "-drive", root_drive(m),
        "-device", "nvme,drive=root,serial=scxvmroot",
        "-drive", f"file={m.run_image},if=none,id=run,format=raw",
        "-device", "nvme,drive=run,serial=scxvmrun",
        "-chardev", f"file,id=con,path={m.console_log}", "-serial", "chardev:con",
        "-device", "virtio-serial-pci,id=vser0",
        *port("scxvm.ctl", m.ctl_log), *port("scxvm.out", m.out_log),
        *(["-qmp", f"unix:{m.qmp_socket},server=on,wait=off"] if m.qmp_socket else []),
    ]  # fmt: skip
