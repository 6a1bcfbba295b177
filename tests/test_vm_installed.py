"""Host-only tests of the harness parts the package tests use (no guest is booted here).

The installed image flavour (no python3, no working tree), the second boot of the same root disk
(`then`: a qcow2 overlay instead of snapshot=on, the second command staged on the run disk) and
the local apt repository's parsing of trixie apt's answer.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tools.vm import cli, image, qemu, repo, rundisk, runner
from tools.vm.codes import HarnessCode, VMError

# -------------------------------------------------------------------------------- image flavours


def test_default_flavour_recipe_is_unchanged_by_the_flavours() -> None:
    """Its cache key must not move, or every checkout would rebuild its default image for nothing."""
    rec = image.recipe()
    assert rec == image.recipe(image.DEFAULT) and "flavour" not in rec
    assert set(rec) == {"suite", "mirror", "variant", "packages", "baked", "files", "partuuid", "layout"}
    assert rec["packages"] == sorted(image.PACKAGES)
    assert set(rec["files"]) == {*image.BAKED, image.CUSTOMIZE}  # type: ignore[arg-type]
    assert image.customize_script() == (image.GUEST_DIR / image.CUSTOMIZE).read_text()
    assert image.image_root() == image.image_root(image.DEFAULT)
    assert image.image_root().name == "image"


def test_installed_flavour_has_no_python_no_launcher_and_its_own_cache() -> None:
    rec = image.recipe(image.INSTALLED)
    pkgs = rec["packages"]
    assert isinstance(pkgs, list)
    # what scxctl.deb must bring itself
    assert not [p for p in pkgs if p.startswith("python3") or p in ("libbpf1", "bpftool")]
    assert {"systemd", "systemd-sysv", "dbus", "stress-ng", "sudo", "passwd", "procps"} <= set(pkgs)
    baked = image.baked(image.INSTALLED)
    assert image.LAUNCHER not in baked and "scxvm-boot" in baked and "scxvm-run.service" in baked
    assert rec["flavour"] == image.INSTALLED
    assert image.cache_key(rec) != image.cache_key(image.recipe())
    # a build of one flavour evicts old images of its own flavour only (image_root's siblings survive)
    assert image.image_root(image.INSTALLED) != image.image_root()
    assert image.image_root(image.INSTALLED).parent == image.image_root().parent


def test_installed_customize_runs_the_default_steps_then_removes_the_overlay() -> None:
    text = image.customize_script(image.INSTALLED)
    default = (image.GUEST_DIR / image.CUSTOMIZE).read_text()
    extra = (image.GUEST_DIR / image.CUSTOMIZE_INSTALLED).read_text()
    # customize.sh writes the .pth without python3 installed: its directory has to exist first
    assert text.index("mkdir -p /usr/lib/python3/dist-packages") < text.index(default)
    assert text.index(default) < text.index(extra)
    assert "rm -f /usr/lib/python3/dist-packages/scxctl-worktree.pth" in extra
    assert "/etc/apt/sources.list" in extra  # no network in the guest: no mirror to fail on


def test_installed_customize_is_valid_bash() -> None:
    proc = subprocess.run(["bash", "-n", "-c", image.customize_script(image.INSTALLED)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_unknown_flavour_is_an_error() -> None:
    with pytest.raises(VMError, match="unknown image flavour"):
        image.recipe("bare")
    res = CliRunner().invoke(cli.app, ["run", "--flavour", "bare", "--", "true"])
    assert res.exit_code == 2


# -------------------------------------------------------------------------------- the run disk


def test_installed_runs_stage_no_working_tree(tmp_path: Path) -> None:
    staging = tmp_path / "stage"
    rundisk.stage(staging, "true", [], None, project=False)
    assert not (staging / "project").exists()
    assert "/opt/scxctl" not in (staging / "fstab.run").read_text()
    assert "/mnt/scxvm/results /results" in (staging / "fstab.run").read_text()
    assert "/opt/scxctl" not in rundisk.fstab_run("7.3.4+deb13-cloud-amd64", project=False)


def test_fstab_binds_a_second_kernels_modules_under_its_release() -> None:
    tab = rundisk.fstab_run("7.3.4+deb13-cloud-amd64", second="6.12.9+bpo-cloud-amd64").splitlines()
    assert "/mnt/scxvm/kernel /lib/modules/7.3.4+deb13-cloud-amd64 none bind,X-mount.mkdir 0 0" in tab
    assert "/mnt/scxvm/kernel2 /lib/modules/6.12.9+bpo-cloud-amd64 none bind,X-mount.mkdir 0 0" in tab
    assert not any("kernel2" in line for line in rundisk.fstab_run("7.3.4+deb13-cloud-amd64").splitlines())


def test_second_command_is_staged_beside_the_first(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    rundisk.stage(one, "echo first", [], None)
    assert not (one / "then").exists()  # guest.sh: no `then` file, one boot as always
    nonce = rundisk.stage(two, "echo first", [], None, then="echo second; exit 4")
    assert (two / "cmd").read_text() == "echo first"
    assert (two / "then").read_text() == "echo second; exit 4"
    assert (two / "nonce").read_text().strip() == nonce


def test_a_second_kernels_modules_are_staged_for_the_second_boot(tmp_path: Path) -> None:
    mods1, mods2 = tmp_path / "m1", tmp_path / "m2"
    for d, name in ((mods1, "new.ko"), (mods2, "old.ko")):
        d.mkdir()
        (d / name).write_text(name)
    stage = tmp_path / "stage"
    rundisk.stage(stage, "true", [], mods1, "7.3.4", then="true", second_kernel=(mods2, "6.12.9"))
    assert (stage / "kernel" / "new.ko").exists() and (stage / "kernel2" / "old.ko").exists()
    assert "/mnt/scxvm/kernel2 /lib/modules/6.12.9 " in (stage / "fstab.run").read_text()


def test_guest_script_picks_the_command_by_the_root_disk_marker() -> None:
    """The protocol pieces guest.sh must keep: nonce-tied marker, copies once, ordered shutdown."""
    text = rundisk.GUEST_SCRIPT.read_text()
    assert 'MARK=/var/lib/scxvm/first-done' in text
    assert '[ "$seen" = "$nonce" ]' in text and "cmdfile=$R/then" in text
    assert 'echo "$nonce" >"$MARK" && sync' in text
    # the marker is on the root disk before the exit marker tells the host it may power off
    assert text.index('>"$MARK" && sync') < text.index('mark "exit=$rc"')
    assert '[ -z "$second" ] && while' in text
    assert '[ -n "$proj" ] && export PYTHONPATH=$proj' in text


# -------------------------------------------------------------------------------- QEMU and the two boots


def _machine(**kw: object) -> qemu.Machine:
    m = qemu.Machine(Path("/k"), Path("/w/root.qcow2"), Path("/run.img"), Path("/c"), Path("/t"), Path("/o"))
    return dataclasses.replace(m, **kw)  # type: ignore[arg-type]


def test_qemu_argv_writes_through_an_overlay_for_two_boots() -> None:
    argv = qemu.argv(_machine(persistent_root=True))
    drive = argv[argv.index("-drive") + 1]
    assert drive == "file=/w/root.qcow2,if=none,id=root,format=qcow2"
    assert "snapshot" not in " ".join(argv)
    plain = qemu.argv(_machine())
    assert "format=raw,snapshot=on" in plain[plain.index("-drive") + 1]


@pytest.mark.skipif(shutil.which("qemu-img") is None, reason="qemu-img is not installed (qemu-utils)")
def test_root_overlay_backs_onto_a_link_of_the_base_image(tmp_path: Path) -> None:
    base = tmp_path / "image" / "rootfs.img"
    base.parent.mkdir()
    base.write_bytes(b"\0" * 1024 * 1024)
    work = tmp_path / "run"
    work.mkdir()
    overlay = runner.root_overlay(base, work)
    cmd = ["qemu-img", "info", "--output", "json", str(overlay)]
    info = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    assert info["format"] == "qcow2" and info["backing-filename-format"] == "raw"
    assert Path(info["backing-filename"]) == work / "base.img"
    assert (work / "base.img").stat().st_ino == base.stat().st_ino
    shutil.rmtree(base.parent)  # a rebuild deleting the image between the boots
    assert (work / "base.img").stat().st_size == 1024 * 1024


def _outcome(code: int, message: str | None = None, out: bytes = b"") -> runner.Outcome:
    return runner.Outcome(code, out, message, "tcg", 50.0, 60.0, f"console {code}\n", qemu_s=55.0)


def test_a_second_boot_follows_only_a_clean_first_command() -> None:
    assert runner.reboots(_outcome(0))
    assert not runner.reboots(_outcome(3))
    assert not runner.reboots(_outcome(int(HarnessCode.TIMEOUT), "guest command timed out"))
    assert not runner.reboots(_outcome(int(HarnessCode.NO_COMMAND), "guest never reached the command"))


def test_merge_keeps_the_second_code_and_both_outputs() -> None:
    first = _outcome(0, out=b"one\n")
    second = dataclasses.replace(_outcome(4, out=b"two\n"), boot_s=40.0, wall_s=180.0)
    m = runner.merge(first, second)
    assert (m.returncode, m.message, m.output) == (4, None, b"one\ntwo\n")
    assert m.boot_s == 50.0 and m.second_boot_s == 40.0 and m.qemu_s == 110.0 and m.wall_s == 180.0
    assert m.console == "console 0\nconsole 4\n"


def _spec(then: str | None) -> runner.RunSpec:
    return runner.RunSpec(command="first", then=then, systemd=True)


@pytest.mark.parametrize(("codes", "boots", "final"), [([0, 7], 2, 7), ([5], 1, 5), ([0], 1, 0)])
def test_boots_runs_the_second_command_after_a_clean_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, codes: list[int], boots: int, final: int
) -> None:
    seen: list[tuple[Path, float, str]] = []
    kernels: list[Path] = []

    def fake_boot(m: qemu.Machine, binary: str, nonce: str, spec: runner.RunSpec, boot_timeout: float,
                  sink: object, work: Path, t0: float, grace: float = runner.SHUTDOWN_GRACE_S,
                  stderr_name: str = "qemu.stderr") -> runner.Outcome:  # fmt: skip
        seen.append((m.ctl_log, grace, stderr_name))
        kernels.append(m.kernel)
        return _outcome(codes[len(seen) - 1])

    monkeypatch.setattr(runner, "_boot", fake_boot)
    m = _machine(persistent_root=True, ctl_log=tmp_path / "ctl.log")
    then = None if codes == [0] else "second"
    other = Path("/k/oldest/vmlinux")
    out = runner._boots(m, "qemu", "n", _spec(then), 300.0, None, tmp_path, 0.0, other)  # type: ignore[arg-type]
    assert out.returncode == final and len(seen) == boots
    assert kernels == [m.kernel, other][:boots]  # the second boot boots the second kernel
    if then is not None:
        assert seen[0][1] == runner.REBOOT_GRACE_S  # the first boot shuts down in order
    if boots == 2:
        assert seen[1] == (tmp_path / "ctl2.log", runner.SHUTDOWN_GRACE_S, "qemu2.stderr")
        assert (tmp_path / "ctl2.log").exists()


def test_run_cli_passes_flavour_and_then(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[runner.RunSpec] = []

    def fake(spec: runner.RunSpec, sink: object = None) -> runner.Outcome:
        got.append(spec)
        return _outcome(4)

    monkeypatch.setattr(runner, "run", fake)
    args = ["run", "--systemd", "--flavour", "installed", "--then", "scxctl status",
            "--", "apt-get", "install", "-y", "./x.deb"]  # fmt: skip
    res = CliRunner().invoke(cli.app, args)
    assert res.exit_code == 4, res.output
    assert got[0].flavour == "installed" and got[0].then == "scxctl status"
    assert got[0].command == "apt-get install -y ./x.deb"


# -------------------------------------------------------------------------------- the local apt repository

SIMULATION = """\
NOTE: This is only a simulation!
Inst gcc-14-base (14.2.0-19 Debian:13.2/stable [amd64])
Inst libc6 (2.41-12+deb13u5 Debian:13.2/stable, Debian-Security:13/stable-security [amd64])
Inst zlib1g (1:1.3.dfsg+really1.3.1-1+deb13u1 Debian:13.2/stable [amd64])
Inst python3-typer (0.15.2-1 Debian:13.2/stable [all])
Inst scxctl (0.1.0-1 local-deb [amd64])
Conf libc6 (2.41-12+deb13u5 Debian:13.2/stable [amd64])
"""


def test_simulation_lists_what_apt_would_install_with_their_file_names() -> None:
    pkgs = repo.parse_simulation(SIMULATION)
    assert [p.name for p in pkgs] == ["gcc-14-base", "libc6", "zlib1g", "python3-typer", "scxctl"]
    by = {p.name: p for p in pkgs}
    assert by["libc6"].arch == "amd64" and by["python3-typer"].arch == "all"
    assert by["zlib1g"].filename() == "zlib1g_1%3a1.3.dfsg+really1.3.1-1+deb13u1_amd64.deb"


def test_repository_is_keyed_by_the_debs_content(tmp_path: Path) -> None:
    a, b = tmp_path / "a.deb", tmp_path / "b.deb"
    a.write_bytes(b"one")
    b.write_bytes(b"two")
    assert repo.repo_key(a) != repo.repo_key(b)
    assert repo.repo_key(a) == repo.repo_key(a)
    # the packages offered beside it are part of the key, in any order
    extras = ("prometheus-node-exporter", "curl")
    assert repo.repo_key(a, extras) == repo.repo_key(a, extras[::-1]) != repo.repo_key(a)
    assert repo.SOURCES_LINE == "deb [trusted=yes] file:/srv/repo ./"
