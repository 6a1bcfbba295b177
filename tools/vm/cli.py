"""`python -m tools.vm`: the harness command line (Typer, like scxctl itself)."""

from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from scxctl.cli import run_app
from scxctl.ui import report_error
from tools import clikit
from tools.vm import accel, image, kernel, matrix, qemu, repo, runner
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
    return clikit.fail(exc, PROG)


@app.callback()
def _global(quiet: clikit.QuietOption = False) -> None:
    clikit.configure_logging(quiet)


VERSION_HELP = ("newest, oldest (with sched_ext), a series (6.16: its newest) or one kernel (6.16.12); "
                "default: the default kernel (the newest when it was prepared).")


@app.command("kernel")
def kernel_cmd(
    version: Annotated[str | None, typer.Option("--version", "-V", help=VERSION_HELP)] = None,
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Ask the archive again (a newer kernel).")
    ] = False,
    list_: Annotated[
        bool, typer.Option("--list", help="List the archive's kernels and which are cached; fetch nothing.")
    ] = False,
    headers: Annotated[
        bool, typer.Option("--headers", help="Also fetch the kernel's headers (run --headers uses them).")
    ] = False,
) -> None:
    """Download (or reuse) a trixie(-backports) cloud kernel with CONFIG_SCHED_CLASS_EXT=y."""
    try:
        if list_:
            have = {i.version for i in kernel.cached()}
            for c in kernel.available():
                typer.echo(f"{c.abi:<24} {c.version:<22} {'cached' if c.version in have else ''}".rstrip())
            return
        info = kernel.prepare(version, refresh=refresh)
        if headers:
            typer.echo(f"headers: {kernel.prepare_headers(info)}")
    except VMError as exc:
        raise _fail(exc) from None
    typer.echo(f"{info.release} ({info.package} {info.version}): {kernel.vmlinuz(info)}")


FLAVOUR_HELP = ("default: scxctl's dependencies installed, the working tree at /opt/scxctl; "
                "installed: bare trixie, no python3, no working tree (for the .deb tests).")


@app.command("image")
def image_cmd(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if cached.")] = False,
    flavour: Annotated[str, typer.Option("--flavour", help="Which image: " + FLAVOUR_HELP)] = image.DEFAULT,
) -> None:
    """Build (or reuse) the guest's base root filesystem image (debootstrap trixie)."""
    if flavour not in image.FLAVOURS:
        raise typer.BadParameter(f"one of: {', '.join(image.FLAVOURS)}", param_hint="--flavour")
    try:
        path = image.build(force=force, flavour=flavour)
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
    icount: Annotated[
        int | None,
        typer.Option("--icount", metavar="SHIFT", min=0, max=10,
                     help="Guest time counted in instructions (2**SHIFT ns each; TCG, one host thread): "
                          "rates measured in the guest no longer depend on the host's speed or load."),
    ] = None,
    kernel_version: Annotated[
        str | None, typer.Option("--kernel", help="Guest kernel: " + VERSION_HELP)
    ] = None,
    flavour: Annotated[str, typer.Option("--flavour", help="Guest image: " + FLAVOUR_HELP)] = image.DEFAULT,
    then: Annotated[
        str | None,
        typer.Option("--then", metavar="COMMAND",
                     help="After COMMAND exits 0, reboot the same root disk and run this (sh -c); "
                          "exit with its code."),
    ] = None,
    then_kernel: Annotated[
        str | None, typer.Option("--then-kernel", help="The second boot's kernel (--then): " + VERSION_HELP)
    ] = None,
    headers: Annotated[
        bool, typer.Option("--headers", help="The kernel's headers in the guest, as linux-headers-RELEASE "
                           "installs them (for bcc); fetched once per kernel.")
    ] = False,
) -> None:
    """Boot the guest, run COMMAND, stream its output, exit with its exit code."""
    try:
        copies = [Copy.parse(c) for c in copy or []]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--copy") from None
    if flavour not in image.FLAVOURS:
        raise typer.BadParameter(f"one of: {', '.join(image.FLAVOURS)}", param_hint="--flavour")
    spec = runner.RunSpec(
        command=command_string(command), timeout=timeout, boot_timeout=boot_timeout, systemd=systemd,
        cpus=cpus, mem=mem, copies=copies, results=results, keep=keep, tcg_single=tcg_single, icount=icount,
        kernel=kernel_version, flavour=flavour, then=then, then_kernel=then_kernel, headers=headers,
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


@app.command("matrix")
def matrix_cmd(
    kernels: Annotated[
        str | None,
        typer.Option("--kernels", metavar="SPEC,...",
                     help="Kernels to test: series (7.2: all its kernels) or single kernels (6.16.3), "
                          "comma-separated; default: every installable kernel with sched_ext."),
    ] = None,
    series: Annotated[
        bool, typer.Option("--series", help="Only the newest kernel of each series.")
    ] = False,
    json_path: Annotated[
        Path | None, typer.Option("--json", metavar="PATH", help="Also write the rows as JSON (atomically).")
    ] = None,
    results: Annotated[
        Path | None,
        typer.Option("--results", metavar="DIR",
                     help="Keep each guest's /results under DIR/<kernel>/ (default: dropped)."),
    ] = None,
    build: Annotated[
        bool, typer.Option("--build/--no-build", help="make -C bpf first (guests load bpf/build's object).")
    ] = True,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the kernels it would boot; boot none.")
    ] = False,
) -> None:
    """Boot one guest per kernel: doctor's prediction, scxctl run + stress + SIGTERM, fairness; a table.

    Exit 0 when pyland works on every kernel and doctor's verdict agrees everywhere, 1 otherwise.
    """
    specs = [k.strip() for k in kernels.split(",") if k.strip()] if kernels is not None else None
    try:
        offered = [c.abi for c in kernel.available(refresh=False)]
        have = [kernel.abi_of(i.release) for i in kernel.cached()]
        try:
            abis = matrix.select(offered, specs, series, have)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--kernels") from None
        if dry_run:
            typer.echo("\n".join(abis))
            return
        if build:
            matrix.build_object()
    except VMError as exc:
        raise _fail(exc) from None
    rows: list[matrix.Row] = []
    with tempfile.TemporaryDirectory(prefix="scxvm-matrix-") as tmp:
        workdir = results or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            matrix.run_matrix(abis, workdir, on_row=rows.append)
        except KeyboardInterrupt:
            report_error(VMError(f"interrupted after {len(rows)} of {len(abis)} kernels"), PROG)
            typer.echo(matrix.render(rows))
            raise typer.Exit(130) from None
    typer.echo(matrix.render(rows))
    if json_path is not None:
        matrix.write_json(json_path, rows)
    raise typer.Exit(0 if matrix.passed(rows) else 1)


@app.command("repo")
def repo_cmd(
    deb: Annotated[Path, typer.Argument(help="The .deb whose dependency closure the repository holds.")],
    force: Annotated[bool, typer.Option("--force", help="Resolve and download again.")] = False,
) -> None:
    r"""Build (or reuse) a local apt repository with DEB's whole dependency closure; print its directory.

    For the installed-flavour guest, which has no network: --copy DIR:/srv/repo, then in the guest
    `echo 'deb \[trusted=yes] file:/srv/repo ./' >/etc/apt/sources.list.d/local.list`,
    `apt-get update` and `apt-get install ./scxctl_*.deb`.
    """
    try:
        path = repo.build(deb, force=force)
    except VMError as exc:
        raise _fail(exc) from None
    typer.echo(str(path))


def main() -> None:
    try:
        run_app(app, "python -m tools.vm", prog=PROG)
    except VMError as exc:  # pragma: no cover - every command catches its own
        report_error(exc, PROG)
        sys.exit(int(HarnessCode.SETUP))
