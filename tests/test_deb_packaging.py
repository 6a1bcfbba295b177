"""The Debian packaging's invariants (fast, host only) and, marked `deb`, the real chroot build.

The host tests catch what lintian cannot: a unit that starts another install's executable, a
Depends that misses a module scxctl imports, a purge that forgets a directory the unit creates, an
unexplained lintian override, a BPF object that embeds its build path or time.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from scxctl import paths
from scxctl.bpf import buildinfo
from tools.deb import build as debbuild
from tools.deb import chroot as debchroot

ROOT = Path(__file__).resolve().parent.parent
DEBIAN = ROOT / "packaging" / "debian"
UNIT = ROOT / "packaging" / "systemd" / "scxctl.service"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def control() -> list[dict[str, str]]:
    """debian/control as stanzas of fields (continuation lines joined)."""
    stanzas = []
    for block in (DEBIAN / "control").read_text().strip().split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line[:1] in (" ", "\t"):
                fields[key] += "\n" + line.strip()
            else:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        stanzas.append(fields)
    return stanzas


def relation_names(field: str) -> set[str]:
    """Package names in a relationship field (versions, arch qualifiers and alternatives dropped)."""
    names = set()
    for alt in re.split(r"[,|]", field):
        name = re.sub(r"\(.*?\)|\[.*?\]|<.*?>", "", alt).strip().split(":")[0]
        if name:
            names.add(name)
    return names


def unit_values(key: str) -> list[str]:
    lines = UNIT.read_text().splitlines()
    return [line.split("=", 1)[1].strip() for line in lines if line.startswith(f"{key}=")]


def installed_paths() -> dict[str, str]:
    """debian/scxctl.install: source file -> path in the package."""
    out = {}
    for line in (DEBIAN / "scxctl.install").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            src, dest = line.split()
            out[src] = "/" + dest.rstrip("/") + "/" + Path(src).name
    return out


def third_party_imports() -> set[str]:
    """Top-level modules imported anywhere in scxctl/ (lazy imports too) that are not stdlib."""
    found: set[str] = set()
    for py in (ROOT / "scxctl").rglob("*.py"):
        for node in ast.walk(ast.parse(py.read_text(), str(py))):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in ("scxctl", "__future__")}


def test_unit_starts_the_packaged_executable() -> None:
    # pybuild installs [project.scripts] into /usr/bin; the unit must start exactly that one
    assert "scxctl" in PYPROJECT["project"]["scripts"]
    (exec_start,) = unit_values("ExecStart")
    assert exec_start.split()[0] == "/usr/bin/scxctl"
    assert installed_paths()["packaging/systemd/scxctl.service"] == "/usr/lib/systemd/system/scxctl.service"


def test_bpf_object_goes_where_the_loader_looks() -> None:
    assert installed_paths()["bpf/build/pyland.bpf.o"] == paths.PYLAND_OBJECT_INSTALLED


def test_bench_worker_goes_where_the_bench_looks_and_is_built_by_the_package() -> None:
    assert installed_paths()["native/build/scxctl-bench-worker"] == paths.BENCH_WORKER_INSTALLED
    rules = (DEBIAN / "rules").read_text()
    assert "$(MAKE) -C native" in rules
    # a native executable: its shared libraries must reach Depends
    assert "${shlibs:Depends}" in (DEBIAN / "control").read_text()


# optional imports (imported lazily, by one command) -> the package that must be in Recommends
OPTIONAL_IMPORTS = {"bcc": "python3-bpfcc"}


def test_depends_cover_every_import() -> None:
    # ${python3:Depends} carries pyproject's dependencies (python3-NAME); the rest must be explicit
    binary = control()[1]
    explicit = relation_names(binary["Depends"])
    from_pyproject = {re.split(r"[<>=!~\[; ]", d)[0].lower() for d in PYPROJECT["project"]["dependencies"]}
    assert "${python3:Depends}" in binary["Depends"]
    dist = {m: m.replace("_", "-") for m in third_party_imports()}  # prometheus_client: prometheus-client
    missing = {m for m in third_party_imports() - OPTIONAL_IMPORTS.keys()
               if dist[m] not in from_pyproject and f"python3-{dist[m]}" not in explicit}
    assert not missing, f"imported by scxctl/ but in neither pyproject's dependencies nor Depends: {missing}"
    # libbpf.so.1 is loaded with ctypes, which no dependency generator sees
    libbpf = (ROOT / "scxctl" / "bpf" / "libbpf_api.py").read_text()
    assert 'LIBBPF_SONAME = "libbpf.so.1"' in libbpf
    assert re.search(r"libbpf1 \(>= 1:1\.4\)", binary["Depends"])


def test_optional_imports_are_recommended_and_headers_suggested() -> None:
    binary = control()[1]
    assert OPTIONAL_IMPORTS.keys() <= third_party_imports()  # still imported: else drop the Recommends
    assert set(OPTIONAL_IMPORTS.values()) <= relation_names(binary.get("Recommends", ""))
    assert not set(OPTIONAL_IMPORTS.values()) & relation_names(binary["Depends"])
    assert {n for n in relation_names(binary.get("Suggests", "")) if n.startswith("linux-headers-")}


def test_no_recommends_or_suggests_that_scxctl_does_not_use() -> None:
    binary = control()[1]
    code = "\n".join(p.read_text() for p in (ROOT / "scxctl").rglob("*.py"))
    for field in ("Recommends", "Suggests"):
        for name in relation_names(binary.get(field, "")):
            assert name.removeprefix("python3-") in code, f"{field}: {name} is never used by scxctl/"


def test_dbus_and_polkit_files_go_where_the_bus_and_polkit_read_them() -> None:
    installed = installed_paths()
    assert installed["packaging/dbus/org.scx.Loader.conf"] == "/usr/share/dbus-1/system.d/org.scx.Loader.conf"
    assert installed["packaging/polkit/org.scxctl.policy"] == "/usr/share/polkit-1/actions/org.scxctl.policy"
    assert installed["packaging/polkit/50-scxctl.rules"] == "/usr/share/polkit-1/rules.d/50-scxctl.rules"
    assert "python3-dbus-fast" in relation_names(control()[1]["Depends"])


def test_the_bus_policy_polkit_action_and_unit_name_what_the_daemon_serves() -> None:
    from scxctl.daemon import dbus_service, polkit
    from scxctl.daemon.config import DaemonConfig

    assert unit_values("BusName") == [dbus_service.BUS_NAME] and unit_values("Type") == ["notify"]
    conf = ET.parse(ROOT / "packaging/dbus/org.scx.Loader.conf").getroot()
    root = next(p for p in conf.iter("policy") if p.get("user") == "root")
    assert [a.get("own") for a in root.iter("allow") if a.get("own")] == [dbus_service.BUS_NAME]
    default = next(p for p in conf.iter("policy") if p.get("context") == "default")
    assert not [a for a in default.iter("allow") if a.get("own")]
    members = {a.get("send_member") for a in default.iter("allow")
               if a.get("send_interface") == dbus_service.INTERFACE}
    assert members == set(dbus_service.METHODS)  # polkit decides, so the bus lets every caller ask
    actions = ET.parse(ROOT / "packaging/polkit/org.scxctl.policy").getroot()
    (action,) = actions.iter("action")
    assert action.get("id") == polkit.ACTION
    assert action.findtext("defaults/allow_active") == "auth_admin_keep"
    assert action.findtext("defaults/allow_any") == "no"
    rules = (ROOT / "packaging/polkit/50-scxctl.rules").read_text()
    assert 'indexOf("org.scxctl.") === 0' in rules and f'isInGroup("{DaemonConfig().group}")' in rules


def test_metrics_need_prometheus_client_and_suggest_node_exporter() -> None:
    binary = control()[1]
    assert "prometheus_client" in third_party_imports()
    assert "python3-prometheus-client" in relation_names(binary["Depends"])
    assert "prometheus-node-exporter" in relation_names(binary["Suggests"])


def test_unit_writes_only_the_metrics_dir_and_has_no_ip_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCXCTL_METRICS_FILE", raising=False)
    # "-": a machine without node-exporter has no such directory, and the unit must start anyway
    assert unit_values("ReadWritePaths") == [f"-{paths.metrics_file().parent}"]
    assert unit_values("ProtectSystem") == ["strict"]
    assert unit_values("RestrictAddressFamilies") == ["AF_UNIX"]
    assert unit_values("NoNewPrivileges") == ["yes"]


def test_control_is_what_a_debian_maintainer_expects() -> None:
    source, binary = control()
    text = (DEBIAN / "control").read_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert source["Standards-Version"] == "4.7.2"
    assert source["Rules-Requires-Root"] == "no"
    assert {"dh-sequence-python3", "dh-sequence-installsysusers"} <= relation_names(source["Build-Depends"])
    assert "--with" not in (DEBIAN / "rules").read_text()
    # no made-up project addresses
    assert not {"Homepage", "Vcs-Git", "Vcs-Browser"} & (source.keys() | binary.keys())
    assert len(binary["Description"].splitlines()[0]) <= 72


def test_group_comes_from_sysusers() -> None:
    entries = [line.split() for line in (DEBIAN / "scxctl.sysusers").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    assert ["g", "scxctl", "-", "-"] in entries
    example = (ROOT / "packaging" / "systemd" / "config.toml.example").read_text()
    assert re.search(r'^group = "scxctl"', example, re.MULTILINE)


def test_purge_removes_every_directory_the_unit_creates() -> None:
    base = {"StateDirectory": "/var/lib", "LogsDirectory": "/var/log", "RuntimeDirectory": "/run",
            "ConfigurationDirectory": "/etc"}
    created = {f"{prefix}/{name}" for key, prefix in base.items() for name in unit_values(key)}
    assert created == {"/var/lib/scxctl", "/var/log/scxctl", "/run/scxctl", "/etc/scxctl"}
    postrm = (DEBIAN / "scxctl.postrm").read_text()
    (rm,) = re.findall(r"^\s*rm -rf (.+)$", postrm, re.MULTILINE)
    assert created <= set(rm.split())
    assert "#DEBHELPER#" in postrm and os.access(DEBIAN / "scxctl.postrm", os.X_OK)


def test_daemon_defaults_match_the_purged_directories(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SCXCTL_CONFIG_DIR", "SCXCTL_STATE_DIR", "SCXCTL_LOG_DIR", "SCXCTL_RUNTIME_DIR"):
        monkeypatch.delenv(var, raising=False)
    rm = re.findall(r"^\s*rm -rf (.+)$", (DEBIAN / "scxctl.postrm").read_text(), re.MULTILINE)[0].split()
    for d in (paths.config_dir(), paths.state_dir(), paths.log_dir(), paths.runtime_dir()):
        assert str(d) in rm


def test_every_lintian_override_has_a_reason() -> None:
    lines = (DEBIAN / "scxctl.lintian-overrides").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() and not line.startswith("#"):
            assert i > 0 and lines[i - 1].startswith("# "), f"override without a reason comment: {line}"


def test_autopkgtests_exist_and_are_executable() -> None:
    text = (DEBIAN / "tests" / "control").read_text()
    names = [n for line in re.findall(r"^Tests: (.+)$", text, re.MULTILINE) for n in line.split()]
    assert names
    for name in names:
        script = DEBIAN / "tests" / name
        assert script.is_file() and os.access(script, os.X_OK), script


def test_docs_and_examples_are_shipped() -> None:
    assert (DEBIAN / "scxctl.docs").read_text().split() == ["README.md"]
    examples = (DEBIAN / "scxctl.examples").read_text().split()
    assert "packaging/systemd/config.toml.example" in examples
    for entry in [*examples, *(DEBIAN / "scxctl.manpages").read_text().split()]:
        assert (ROOT / entry).exists(), entry


def test_buildinfo_time_follows_source_date_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1796025600")
    assert buildinfo.build_time() == "2026-11-30T08:00:00+00:00"
    a = buildinfo.metadata(ROOT / "bpf", "true")
    assert a == buildinfo.metadata(ROOT / "bpf", "true")
    assert set(a) == {"schema", "source_hash", "compiler", "built_at", "files"}
    assert a["source_hash"] == buildinfo.source_hash(ROOT / "bpf")  # the hash ignores the epoch
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ValueError, match="SOURCE_DATE_EPOCH"):
        buildinfo.build_time()
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    assert buildinfo.build_time().endswith("+00:00")


def test_bpf_object_does_not_embed_the_build_path() -> None:
    makefile = (ROOT / "bpf" / "Makefile").read_text()
    assert "-ffile-prefix-map=$(ROOT)=." in makefile
    obj = ROOT / "bpf" / "build" / "pyland.bpf.o"
    if obj.is_file() and buildinfo.read_buildinfo(obj) is not None:
        info = buildinfo.read_buildinfo(obj)
        if info is not None and info.source_hash == buildinfo.source_hash(ROOT / "bpf"):
            assert str(ROOT).encode() not in obj.read_bytes()


def test_build_chroot_key_follows_build_depends_only() -> None:
    text = (DEBIAN / "control").read_text()
    keys = debchroot.layer_keys(text)
    runtime = text.replace("Depends: ${misc:Depends},", "Depends: ${misc:Depends}, foo,")
    assert runtime != text and debchroot.layer_keys(runtime) == keys
    more = debchroot.layer_keys(text.replace("Build-Depends: ", "Build-Depends: foo, "))
    assert more["base"] == keys["base"] and more["build"] != keys["build"] and more["lint"] != keys["lint"]
    assert "clang" in debchroot.build_depends(text)


def test_source_export_is_the_working_tree_as_git_sees_it(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed, so no checkout can be listed")
    repo = tmp_path / "repo"
    (repo / "packaging" / "debian").mkdir(parents=True)
    (repo / "packaging" / "debian" / "control").write_text("Source: x\n")
    (repo / ".gitignore").write_text("build/\n")
    (repo / "tracked.py").write_text("a\n")
    (repo / "gone.py").write_text("b\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
    (repo / "gone.py").unlink()  # deleted but still tracked
    (repo / "tracked.py").write_text("uncommitted\n")
    (repo / "new.py").write_text("untracked\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_text("ignored\n")
    dest = tmp_path / "export"
    debbuild.export_tree(dest, repo)
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() or p.is_symlink())
    assert files == [".gitignore", "debian", "new.py", "packaging/debian/control", "tracked.py"]
    assert (dest / "tracked.py").read_text() == "uncommitted\n"
    assert os.readlink(dest / "debian") == "packaging/debian"


def _tiny_deb(tmp_path: Path, name: str, content: str) -> Path:
    tree = tmp_path / name
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        "Package: tiny\nVersion: 1\nArchitecture: all\nMaintainer: t <t@invalid.example>\nDescription: t\n")
    (tree / "usr" / "share" / "tiny").mkdir(parents=True)
    (tree / "usr" / "share" / "tiny" / "f").write_text(content)
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1796025600"}
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(tmp_path / f"{name}.deb")],
                   check=True, capture_output=True, env=env)
    return tmp_path / f"{name}.deb"


def test_deb_contents_names_what_differs(tmp_path: Path) -> None:
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed, so no .deb can be made or read")
    a, b = _tiny_deb(tmp_path, "a", "one\n"), _tiny_deb(tmp_path, "b", "two\n")
    ca, cb = debbuild.deb_contents(a), debbuild.deb_contents(b)
    assert debbuild.deb_contents(a) == ca
    assert [k for k in ca if ca[k] != cb[k]] == ["data:./usr/share/tiny/f"]
    assert "sha256=" in ca["data:./usr/share/tiny/f"] and "root:root" in ca["control:./control"]


def _deb_unavailable() -> str | None:
    if shutil.which("debootstrap") is None:
        return ("debootstrap is not installed (apt-get install debootstrap), "
                "so no trixie build chroot can be made")
    if os.geteuid() != 0:
        return "building the package chroot needs root (debootstrap, chroot, overlay mounts)"
    return None


@pytest.mark.deb
def test_deb_builds_lintian_clean_reproducible_and_passes_autopkgtest(tmp_path: Path) -> None:
    reason = _deb_unavailable()
    if reason is not None:
        pytest.skip(reason)
    proc = subprocess.run(
        [sys.executable, "-m", "tools.deb", "-q", "build", "--out", str(tmp_path), "--check-reproducible",
         "--autopkgtest"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    debs = list(tmp_path.glob("scxctl_*_amd64.deb"))
    assert len(debs) == 1 and (tmp_path / debs[0].name.replace(".deb", ".changes")).is_file()
    assert "no E:, W: or P: tag" in out
    assert "reproducible: yes" in out
    assert "autopkgtest: pass" in out and "purge: PASS" in out


def test_the_metrics_directory_is_one_path_in_the_unit_trigger_postinst_and_postrm() -> None:
    metrics = Path(paths.METRICS_FILE_DEFAULT)
    assert f"-{metrics.parent}" in unit_values("ReadWritePaths")
    triggers = [ln.split() for ln in (DEBIAN / "scxctl.triggers").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    assert triggers == [["interest-noawait", str(metrics.parent)]]
    assert re.search(rf"^DIR={re.escape(str(metrics.parent))}$", (DEBIAN / "scxctl.postinst").read_text(),
                     re.MULTILINE)
    assert re.search(rf"^\s*rm -f {re.escape(str(metrics))}$", (DEBIAN / "scxctl.postrm").read_text(),
                     re.MULTILINE)


@pytest.mark.parametrize("mounted,pid,restarts", [
    (False, "4242", True),  # started before the directory existed: its sandbox lacks the entry
    (True, "4242", False),  # the entry is there: nothing to do (an upgrade of node-exporter)
    (False, "0", False),  # the unit is not running
])
def test_the_trigger_restarts_the_daemon_only_when_its_sandbox_lacks_the_directory(
        tmp_path: Path, mounted: bool, pid: str, restarts: bool) -> None:
    """The postinst's `triggered` branch, with systemctl, deb-systemd-invoke and /proc, /run and the
    directory moved under tmp_path by rewriting their absolute paths in a copy of the script."""
    metrics_dir = Path(paths.METRICS_FILE_DEFAULT).parent
    fake = {"/run/systemd/system": tmp_path / "run-systemd", str(metrics_dir): tmp_path / "textfile",
            "/proc/": f"{tmp_path}/proc/"}
    text = (DEBIAN / "scxctl.postinst").read_text()
    for real, there in fake.items():
        text = text.replace(real, str(there))
    script = tmp_path / "postinst"
    script.write_text(text.replace("#DEBHELPER#", ""))
    (tmp_path / "run-systemd").mkdir()
    (tmp_path / "textfile").mkdir()
    (tmp_path / "proc" / pid).mkdir(parents=True)
    entry = f"1 2 0:3 {tmp_path}/textfile {tmp_path}/textfile rw - ext4 /dev/x rw\n"
    (tmp_path / "proc" / pid / "mountinfo").write_text("1 0 0:1 / / ro - ext4 /dev/x ro\n" + entry * mounted)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for tool, out in (("systemctl", pid), ("deb-systemd-invoke", "")):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >>{calls}\necho {out}\n')
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    proc = subprocess.run(["sh", str(script), "triggered", str(metrics_dir)], env=env, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    invoked = calls.read_text().splitlines()
    assert invoked[0] == "systemctl show -P MainPID scxctl.service"
    assert ("deb-systemd-invoke try-restart scxctl.service" in invoked) == restarts, invoked
    assert ("restarting scxctl.service" in proc.stdout) == restarts, proc.stdout
