"""Build metadata: the one source hash, the embedded section, stale detection, the doctor check."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from scxctl import paths
from scxctl.bpf import buildinfo
from scxctl.bpf import object as bpfobject
from scxctl.doctor.checks_bpfobj import bpf_object
from scxctl.doctor.model import DoctorContext, Status
from scxctl.errors import ExitCode, ScxctlError

ROOT = Path(__file__).resolve().parent.parent
BPF = ROOT / "bpf"
BUILT = BPF / "build" / "pyland.bpf.o"
OBJCOPY = shutil.which("llvm-objcopy-19") or shutil.which("llvm-objcopy")


@pytest.fixture
def built() -> Path:
    if not BUILT.is_file():
        pytest.fail(f"{BUILT} missing: run make -C bpf")
    return BUILT


@pytest.fixture
def srcdir(tmp_path: Path) -> Path:
    """A copy of the hash inputs, to change without touching the checkout."""
    d = tmp_path / "bpf"
    d.mkdir()
    for f in buildinfo.source_files(BPF):
        shutil.copy(f, d / f.name)
    return d


def embed(dst: Path, meta: bytes) -> Path:
    """The object as compiled, before `make` embedded the real metadata, with `meta` embedded."""
    src = BPF / "build" / "pyland.raw.o"
    blob = dst.with_suffix(".json")
    blob.write_bytes(meta)
    assert OBJCOPY
    subprocess.run([OBJCOPY, "--add-section", f"{buildinfo.SECTION}={blob}", str(src), str(dst)], check=True)
    return dst


def test_hash_inputs_are_the_sources_headers_and_makefile() -> None:
    names = [f.name for f in buildinfo.source_files(BPF)]
    assert {"pyland.bpf.c", "pyland.h", "compat.h", "vmlinux.h", "Makefile"} <= set(names)
    assert names == sorted(names)
    assert not any("/" in n or n.endswith(".o") for n in names)


def test_hash_changes_with_any_input_and_is_stable(srcdir: Path) -> None:
    h0 = buildinfo.source_hash(srcdir)
    assert h0 == buildinfo.source_hash(srcdir)
    assert h0 == buildinfo.source_hash(BPF)
    (srcdir / "vmlinux.h").write_text((srcdir / "vmlinux.h").read_text() + "\n")
    h1 = buildinfo.source_hash(srcdir)
    assert h1 != h0
    (srcdir / "extra.h").write_text("/* new header */\n")
    assert buildinfo.source_hash(srcdir) not in (h0, h1)


def test_built_object_carries_the_hash_of_the_checkout(built: Path) -> None:
    info = buildinfo.read_buildinfo(built)
    assert info is not None
    assert info.source_hash == buildinfo.source_hash(BPF)
    assert "clang" in info.compiler
    assert "pyland.bpf.c" in info.files


def test_section_reader_roundtrip_and_missing_section(built: Path, tmp_path: Path) -> None:
    obj = embed(tmp_path / "x.o", b'{"source_hash": "abc", "compiler": "cc", "built_at": "t"}')
    info = buildinfo.read_buildinfo(obj)
    assert info is not None and (info.source_hash, info.compiler) == ("abc", "cc")
    raw = BPF / "build" / "pyland.raw.o"
    assert buildinfo.read_buildinfo(raw) is None
    with pytest.raises(buildinfo.ElfError):
        buildinfo.read_section(BPF / "pyland.h", ".text")


def _cands(*items: tuple[str, Path]) -> list[tuple[str, Path]]:
    return list(items)


def test_resolve_accepts_fresh_and_refuses_stale(built: Path, srcdir: Path, tmp_path: Path) -> None:
    v = bpfobject.inspect(_cands(("checkout", built)), bpf_dir=srcdir)
    assert v.fresh is True
    assert bpfobject.resolve(verdict=v) == built
    (srcdir / "pyland.bpf.c").write_text((srcdir / "pyland.bpf.c").read_text() + "/* edit */\n")
    v = bpfobject.inspect(_cands(("checkout", built)), bpf_dir=srcdir)
    assert v.fresh is False
    with pytest.raises(ScxctlError) as e:
        bpfobject.resolve(verdict=v)
    assert e.value.code == ExitCode.BPF and "stale pyland BPF object" in e.value.message
    assert bpfobject.resolve(allow_stale=True, verdict=v) == built


def test_object_without_metadata_is_stale_when_sources_exist(srcdir: Path) -> None:
    raw = BPF / "build" / "pyland.raw.o"
    v = bpfobject.inspect(_cands(("env", raw)), bpf_dir=srcdir)
    with pytest.raises(ScxctlError, match="has no build metadata"):
        bpfobject.resolve(verdict=v)


def test_search_order_first_existing_wins_and_missing_is_an_error(built: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "env.o"
    shutil.copy(built, other)
    monkeypatch.setenv(paths.PYLAND_OBJECT_ENV, str(other))
    cands = paths.pyland_object_candidates()
    assert [o for o, _ in cands] == ["$SCXCTL_BPF_OBJECT", "checkout", "installed"]
    assert cands[0][1] == other and cands[1][1] == built
    assert bpfobject.inspect().chosen.path == other  # type: ignore[union-attr]
    v = bpfobject.inspect(_cands(("a", tmp_path / "nope.o"), ("b", tmp_path / "nope2.o")))
    with pytest.raises(ScxctlError) as e:
        bpfobject.resolve(verdict=v)
    assert e.value.code == ExitCode.BPF and "not found" in e.value.message


def _doctor(monkeypatch: pytest.MonkeyPatch, cands: list[tuple[str, Path]], bpf_dir: Path | None):
    monkeypatch.setattr(paths, "pyland_object_candidates", lambda: cands)
    monkeypatch.setattr(bpfobject, "sources_dir", lambda artifact=bpfobject.PYLAND: bpf_dir)
    return bpf_object(DoctorContext())


def test_doctor_ok_warn_fail(built: Path, srcdir: Path, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    r = _doctor(monkeypatch, [("checkout", built)], srcdir)
    assert r.status is Status.OK and str(built) in r.finding and "matches" in r.finding
    assert r.details["fresh"] is True

    other = embed(tmp_path / "old.o", b'{"source_hash": "0123456789abcdef", "built_at": "x"}')
    r = _doctor(monkeypatch, [("checkout", built), ("installed", other)], srcdir)
    assert r.status is Status.WARN and str(other) in r.finding and "0123456789ab" in r.finding

    r = _doctor(monkeypatch, [("installed", other), ("checkout", built)], srcdir)
    assert r.status is Status.FAIL and "stale" in r.finding and r.hint

    r = _doctor(monkeypatch, [("installed", other)], None)  # no sources: nothing to compare with
    assert r.status is Status.OK and "no bpf/ sources" in r.finding

    r = _doctor(monkeypatch, [("installed", tmp_path / "missing.o")], srcdir)
    assert r.status is Status.FAIL and "no pyland BPF object" in r.finding
