"""`python -m tools.deb`: build the Debian package in a clean trixie chroot (Typer, like tools.vm)."""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from scxctl.cli import run_app
from scxctl.errors import ScxctlError
from tools import clikit
from tools.deb import build, chroot

PROG = "tools.deb"

app = typer.Typer(
    name=PROG,
    help="Build the scxctl .deb in a clean, cached Debian trixie chroot and check it with lintian.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _fail(exc: ScxctlError) -> typer.Exit:
    return clikit.fail(exc, PROG)


@app.callback()
def _global(quiet: clikit.QuietOption = False) -> None:
    clikit.configure_logging(quiet)


def _say(line: str) -> None:
    typer.echo(line)


def _prepare(refresh: bool) -> chroot.Layers:
    layers, seconds, built = chroot.prepare(refresh=refresh)
    what = f"built {', '.join(built)}" if built else "cached"
    _say(f"chroot: {what} in {seconds:.1f} s ({chroot.cache_dir() / 'layers'})")
    return layers


@app.command("chroot")
def chroot_cmd(
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Rebuild every layer (a newer archive).")
    ] = False,
) -> None:
    """Prepare (or reuse) the cached build chroot: base, build (Build-Depends) and lint layers."""
    try:
        with chroot.lock():
            layers = _prepare(refresh)
    except ScxctlError as exc:
        raise _fail(exc) from None
    for name, path in layers.dirs.items():
        _say(f"{name}: {path}")


@app.command("build")
def build_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where the .deb, .buildinfo and .changes go.")] = (
        chroot.CHECKOUT / "dist"),
    lintian: Annotated[bool, typer.Option("--lintian/--no-lintian", help="Run lintian --pedantic.")] = True,
    reproducible: Annotated[
        bool, typer.Option("--check-reproducible",
                           help="Build again elsewhere (path, TZ, umask); the .debs must be identical.")
    ] = False,
    autopkgtest: Annotated[
        bool, typer.Option("--autopkgtest", help="Run debian/tests with autopkgtest (null runner) "
                           "on a chroot holding only the package and its Depends.")
    ] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="Rebuild the cached chroot first.")] = False,
) -> None:
    """dpkg-buildpackage -us -uc -b in a clean trixie chroot, then lintian; exit 1 on any E/W/P tag."""
    t0 = time.monotonic()
    failed: list[str] = []
    try:
        with chroot.lock():
            if (waited := time.monotonic() - t0) > 1:
                _say(f"waited {waited:.1f} s for another build's lock on {chroot.cache_dir()}")
            layers = _prepare(refresh)
            result = build.build(layers, out.resolve())
            _say(f"build: {result.seconds:.1f} s")
            for f in result.files:
                _say(f"  {f}")
            if lintian:
                lint = build.lint(layers, result.files)
                _say(f"lintian --pedantic: {lint.seconds:.1f} s")
                for line in lint.output.splitlines():
                    _say(f"  {line}")
                if not lint.ok:
                    failed.append(f"lintian: {len(lint.failing)} E/W/P tag(s)")
                else:
                    _say("  no E:, W: or P: tag")
            if reproducible:
                with tempfile.TemporaryDirectory(dir=chroot.cache_dir()) as scratch:
                    repro = build.check_reproducible(layers, result, Path(scratch))
                _say(f"reproducible: {'yes' if repro.identical else 'NO'} ({repro.seconds:.1f} s): "
                     f"{result.deb.name} sha256 {_sha256(result.deb)}")
                for d in repro.differences:
                    _say(f"  {d}")
                if not repro.identical:
                    failed.append("the rebuild differs")
            if autopkgtest:
                test = build.autopkgtest(layers, result.deb)
                _say(f"autopkgtest: {'pass' if test.ok else 'FAIL'} ({test.seconds:.1f} s)")
                for line in test.summary or test.output.splitlines()[-40:]:
                    _say(f"  {line}")
                if not test.ok:
                    failed.append("autopkgtest failed")
    except ScxctlError as exc:
        raise _fail(exc) from None
    _say(f"total: {time.monotonic() - t0:.1f} s")
    if failed:
        raise _fail(chroot.DebError("; ".join(failed), hint=f"logs: {chroot.cache_dir() / 'logs'}"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    run_app(app, f"python -m {PROG}", prog=PROG)
