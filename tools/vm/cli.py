"""`python -m tools.vm`: the harness command line (Typer, like scxctl itself)."""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from scxctl import log as logsetup
from scxctl.cli import run_app
from scxctl.ui import report_error
from tools.vm import accel, image, kernel, qemu, runner
from tools.vm.codes import HarnessCode, VMError
from tools.vm.rundisk import Copy

app = typer.Typer(
    name="tools.vm",
    help="Run commands on a Debian sched_ext kernel in QEMU (the tests' VM harness).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


PROG = "tools.vm"


def _fail(exc: VMError) -> typer.Exit:
    report_error(exc, PROG)
    return typer.Exit(int(exc.code))


@app.callback()
def _global(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only warnings and errors on stderr.")] = False,
) -> None:
    logsetup.configure("auto", logging.WARNING if quiet else logging.INFO)


@app.command("kernel")
def kernel_cmd(
    refresh: Annotated[bool, typer.Option("--refresh", help="Look for a newer kernel.")] = False,
) -> None:
    """Download (or reuse) a trixie-backports cloud kernel with CONFIG_SCHED_CLASS_EXT=y."""
    try:
        info = kernel.prepare(refresh=refresh)
    except VMError as exc:
        raise _fail(exc) from None
    typer.echo(f"{info.release} ({info.package} {info.version}): {kernel.vmlinuz(info)}")


@app.command("image")
def image_cmd(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if cached.")] = False,
) -> None:
    """Build (or reuse) the guest's base root filesystem image (debootstrap trixie)."""
    try:
        path = image.build(force=force)
    except VMError as exc:
        raise _fail(exc) from None
    typer.echo(str(path))


@app.command("probe-kvm")
def probe_kvm_cmd(
    refresh: Annotated[bool, typer.Option("--refresh", help="Probe again, ignore the cache.")] = False,
) -> None:
    """Say whether guests will run under KVM or TCG here, and why."""
    try:
        info = kernel.current() or kernel.prepare()
        verdict = accel.choose(qemu.qemu_binary(), kernel.vmlinuz(info), refresh=refresh)
    except VMError as exc:
        raise _fail(exc) from None
    typer.echo(f"{'kvm' if verdict.kvm else 'tcg'}: {verdict.reason}")


def command_string(argv: list[str]) -> str:
    """One argument is a shell command line as it is; several are quoted into one."""
    return argv[0] if len(argv) == 1 else shlex.join(argv)


@app.command("run", context_settings={"allow_interspersed_args": False})
def run_cmd(
    command: Annotated[list[str], typer.Argument(help="Command to run as root in the guest (sh -c).")],
    systemd: Annotated[
        bool, typer.Option("--systemd", help="Boot full systemd; run from a unit after multi-user.target.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds the command may run (then exit 124).")
    ] = 300.0,
    boot_timeout: Annotated[
        float | None,
        typer.Option("--boot-timeout", min=1, help="Seconds to reach the command (then exit 126); "
                     "default 300 under TCG, 60 under KVM."),
    ] = None,
    cpus: Annotated[int, typer.Option("--cpus", min=1, max=64, help="Guest vCPUs.")] = 2,
    mem: Annotated[str, typer.Option("--mem", help="Guest memory (QEMU syntax: 2G, 1536M).")] = "2G",
    copy: Annotated[
        list[str] | None,
        typer.Option("--copy", metavar="SRC:DST", help="Copy a host file or directory to DST in the guest."),
    ] = None,
    results: Annotated[
        Path | None, typer.Option("--results", help="Host dir to receive the guest's /results.")
    ] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the run dir (console log, run disk).")] = False,
    tcg_single: Annotated[
        bool, typer.Option("--tcg-single", help="One host thread for all vCPUs (no code-patching races).")
    ] = False,
) -> None:
    """Boot the guest, run COMMAND, stream its output, exit with its exit code."""
    try:
        copies = [Copy.parse(c) for c in copy or []]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--copy") from None
    spec = runner.RunSpec(
        command=command_string(command), timeout=timeout, boot_timeout=boot_timeout, systemd=systemd,
        cpus=cpus, mem=mem, copies=copies, results=results, keep=keep, tcg_single=tcg_single,
    )  # fmt: skip
    try:
        outcome = runner.run(spec)
    except VMError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt:
        report_error(VMError("interrupted"), PROG)
        raise typer.Exit(130) from None
    if outcome.message is not None:
        report_error(VMError(f"{outcome.message} (exit {outcome.returncode})"), PROG)
    raise typer.Exit(outcome.returncode)


def main() -> None:
    try:
        run_app(app, "python -m tools.vm", prog=PROG)
    except VMError as exc:  # pragma: no cover - every command catches its own
        report_error(exc, PROG)
        sys.exit(int(HarnessCode.SETUP))
