"""bpf.object's trial load: when doctor loads the pyland object, and what it says when the kernel refuses it.

Fake loaders cover the decisions (when a load is tried, how a refusal reads, the verdict). Real
libbpf on this host covers the reasons: objects from bpf/tests that this kernel refuses (a kfunc no
kernel has, a verifier rejection), and the real pyland object, which this host -- no sched_ext --
refuses too, so doctor's reason can be compared with the line `scxctl run` prints for it.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fakeroot import NO_CAPS, RELEASE, FakeRoot, context, status_text
from typer.testing import CliRunner

from scxctl import paths
from scxctl.bpf import object as bpfobject
from scxctl.bpf.errors import BpfError
from scxctl.bpf.libbpf import BpfObject
from scxctl.cli import app
from scxctl.doctor.checks_bpfobj import bpf_object
from scxctl.doctor.model import CheckResult, DoctorContext, Status
from scxctl.doctor.runner import run_checks
from scxctl.errors import ExitCode
from scxctl.pyland import scheduler
from scxctl.sysfs import SysRoot

ROOT = Path(__file__).resolve().parent.parent
TEST_OBJECTS = ROOT / "bpf" / "build" / "tests"
PYLAND = ROOT / "bpf" / "build" / "pyland.bpf.o"
# what libbpf says when a kernel lacks a kfunc prototype the object was built against
REFUSAL = ("loading pyland.bpf.o failed: Invalid argument (extern (func ksym) 'scx_bpf_create_dsq': "
           "func_proto [477] incompatible with vmlinux [48700])")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF objects needs root")


@pytest.fixture(scope="module")
def objs() -> Path:
    """make -C bpf/tests (the guest has no toolchain but never runs these host tests)."""
    if shutil.which("make"):
        subprocess.run(["make", "-s", "-C", str(ROOT / "bpf" / "tests")], check=True)
    return TEST_OBJECTS


@pytest.fixture
def obj(objs: Path) -> Path:
    """An ELF object without build metadata: with no sources to compare, the freshness verdict is ok."""
    return objs / "globals.bpf.o"


class Loader:
    """Stands in for the trial load: records each call, raises `error` when given one."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[tuple[Path, SysRoot]] = []

    def __call__(self, path: Path, sysroot: SysRoot) -> None:
        self.calls.append((path, sysroot))
        if self.error is not None:
            raise self.error


def plain_load(path: Path, sysroot: SysRoot) -> None:
    """A real load without pyland's configuration, for the small bpf/tests objects."""
    with BpfObject.open(path, sysroot=sysroot) as o:
        o.load()


def _pick(monkeypatch: pytest.MonkeyPatch, obj: Path, bpf_dir: Path | None = None) -> None:
    monkeypatch.setattr(paths, "pyland_object_candidates", lambda: [("$SCXCTL_BPF_OBJECT", obj)])
    monkeypatch.setattr(bpfobject, "sources_dir", lambda artifact=bpfobject.PYLAND: bpf_dir)


def _load(r: CheckResult) -> dict[str, object]:
    load = r.details["load"]
    assert isinstance(load, dict)
    return load


def test_loads_the_chosen_object_and_says_so(tmp_path: Path, obj: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    _pick(monkeypatch, obj)
    loader = Loader()
    ctx = context(fake, bpf_load=loader)
    r = bpf_object(ctx)
    assert r.status is Status.OK and r.hint is None
    assert r.finding.endswith(f"; loaded on this kernel ({RELEASE}) without attaching")
    assert _load(r) == {"attempted": True, "ok": True, "kernel": RELEASE, "error": None}
    assert loader.calls == [(obj, ctx.sysroot)]


def _no_sched_ext(fake: FakeRoot, ctx: DoctorContext) -> None:
    fake.no_sched_ext_machine()


def _unprivileged(fake: FakeRoot, ctx: DoctorContext) -> None:
    fake.write("/proc/self/status", status_text(cap_eff=NO_CAPS))


def _caps_unreadable(fake: FakeRoot, ctx: DoctorContext) -> None:
    fake.unreadable_dir("/proc/self/status")


def _bpf_syscall_failed(fake: FakeRoot, ctx: DoctorContext) -> None:
    ctx.results["bpf.syscall"] = CheckResult("bpf.syscall", "bpf", Status.FAIL, "EACCES", "lockdown")


def _libbpf_failed(fake: FakeRoot, ctx: DoctorContext) -> None:
    ctx.results["libbpf"] = CheckResult("libbpf", "libbpf", Status.FAIL, "libbpf 1.1", "upgrade")


@pytest.mark.parametrize(("machine", "reason"), [
    (_no_sched_ext, "no /sys/kernel/sched_ext: this kernel has no sched_ext"),
    (_unprivileged, "not privileged: CAP_BPF and CAP_SYS_ADMIN not effective"),
    (_caps_unreadable, "capabilities unreadable"),
    (_bpf_syscall_failed, "bpf() does not work here (see bpf.syscall)"),
    (_libbpf_failed, "libbpf is unusable (see libbpf)"),
])
def test_no_load_where_it_cannot_tell_and_the_status_stays(tmp_path: Path, obj: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           machine: object, reason: str) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    _pick(monkeypatch, obj)
    loader = Loader(BpfError("must not be called"))
    ctx = context(fake, bpf_load=loader)
    machine(fake, ctx)  # type: ignore[operator]
    r = bpf_object(ctx)
    assert loader.calls == []
    assert r.status is Status.OK, r.finding  # the freshness verdict alone decides, as before
    load = _load(r)
    assert load["attempted"] is False and reason in str(load["reason"])
    assert f"; load not tried: {load['reason']}" in r.finding and "\n" not in r.finding


def test_a_missing_or_stale_object_is_not_loaded(tmp_path: Path, obj: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRoot(tmp_path / "root").sched_ext_machine()
    loader = Loader(BpfError("must not be called"))
    _pick(monkeypatch, tmp_path / "missing.bpf.o")
    r = bpf_object(context(fake, bpf_load=loader))
    assert r.status is Status.FAIL and _load(r) == {"attempted": False, "reason": "no object to load"}
    sources = tmp_path / "bpf"
    sources.mkdir()
    (sources / "pyland.bpf.c").write_text("/* sources the object was not built from */\n")
    _pick(monkeypatch, obj, sources)
    r = bpf_object(context(fake, bpf_load=loader))
    assert r.status is Status.FAIL and "has no build metadata" in r.finding
    assert _load(r)["attempted"] is False and "stale" in str(_load(r)["reason"])
    assert loader.calls == []


def test_a_refused_load_fails_with_the_reason_run_prints(tmp_path: Path, obj: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    _pick(monkeypatch, obj)
    ctx = context(fake, bpf_load=Loader(BpfError(REFUSAL, err=errno.EINVAL)))
    r = bpf_object(ctx)
    assert r.status is Status.FAIL
    assert r.finding == f"{obj} ($SCXCTL_BPF_OBJECT) does not load on this kernel ({RELEASE}): {REFUSAL}"
    assert r.hint is not None and f"does not support kernel {RELEASE}" in r.hint and "make -C bpf" in r.hint
    assert _load(r) == {"attempted": True, "ok": False, "kernel": RELEASE, "error": REFUSAL,
                        "errno": errno.EINVAL, "exit_code": ExitCode.BPF, "verifier_log_tail": None}


def test_a_refused_load_overrides_the_several_objects_warning(tmp_path: Path, objs: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    monkeypatch.setattr(paths, "pyland_object_candidates",
                        lambda: [("checkout", objs / "globals.bpf.o"), ("installed", PYLAND)])
    monkeypatch.setattr(bpfobject, "sources_dir", lambda artifact=bpfobject.PYLAND: None)
    assert bpf_object(context(fake)).status is Status.WARN
    assert bpf_object(context(fake, bpf_load=Loader(BpfError(REFUSAL)))).status is Status.FAIL


def test_the_verdict_says_pyland_cannot_run_and_why(tmp_path: Path, obj: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    _pick(monkeypatch, obj)
    results = {r.id: r for r in run_checks(context(fake, bpf_load=Loader(BpfError(REFUSAL))))}
    v = results["verdict"]
    assert v.status is Status.FAIL
    assert v.details == {"can_run_sched_ext": True, "can_run_pyland": False, "failed": ["bpf.object"]}
    assert v.finding.endswith(f"this kernel refuses the pyland BPF object: {REFUSAL}")
    assert v.hint == results["bpf.object"].hint


def test_trial_load_closes_the_object_even_when_the_load_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    class Obj:
        closed = False

        def __enter__(self) -> Obj:
            return self

        def __exit__(self, *exc: object) -> None:
            self.closed = True

        def load(self) -> None:
            raise BpfError(REFUSAL)

    made: list[tuple[Path, scheduler.RunOptions, Obj]] = []

    def fake_open(path: Path, opts: scheduler.RunOptions) -> Obj:
        made.append((path, opts, Obj()))
        return made[-1][2]

    monkeypatch.setattr(scheduler, "open_configured", fake_open)
    with pytest.raises(BpfError, match="func_proto"):
        scheduler.trial_load(Path("x.o"))
    [(path, opts, o)] = made
    assert path == Path("x.o") and o.closed
    assert opts == scheduler.RunOptions(sysroot=opts.sysroot)  # `scxctl run`'s defaults


@needs_root
@pytest.mark.parametrize(("name", "reason"), [
    ("missing_kfunc", "extern (func ksym) 'scxctl_test_no_such_kfunc': not found in kernel or module BTFs"),
    ("bad_oob", "the verifier rejected the program (Permission denied): invalid access to map value"),
])
def test_libbpfs_own_reason_reaches_the_finding(tmp_path: Path, objs: Path, monkeypatch: pytest.MonkeyPatch,
                                                 name: str, reason: str) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    path = objs / f"{name}.bpf.o"
    _pick(monkeypatch, path)
    r = bpf_object(context(fake, bpf_load=plain_load))
    with pytest.raises(BpfError) as direct:
        plain_load(path, fake.sysroot)
    assert r.status is Status.FAIL and reason in r.finding and "\n" not in r.finding
    assert _load(r)["error"] == direct.value.message
    assert (_load(r)["verifier_log_tail"] is not None) is (name == "bad_oob")


@needs_root
@pytest.mark.skipif(os.path.isdir("/sys/kernel/sched_ext"), reason="this host could really run pyland")
def test_doctor_and_run_refuse_the_pyland_object_with_one_reason(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The real configured trial load against this host's kernel (no sched_ext kfuncs), with a fake
    sysfs that says sched_ext exists so that both doctor and `scxctl run` get as far as the load."""
    if not PYLAND.is_file():
        pytest.fail(f"{PYLAND} missing: run make -C bpf")
    fake = FakeRoot(tmp_path).sched_ext_machine()
    _pick(monkeypatch, PYLAND)  # no sources to compare: whether bpf/ changed since the build is not the point
    r = bpf_object(DoctorContext(sysroot=fake.sysroot))
    load = _load(r)
    assert r.status is Status.FAIL and load["attempted"] is True and load["ok"] is False
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    res = CliRunner().invoke(app, ["run", "--bpf-object", str(PYLAND), "--stats-interval", "0"],
                             env={"SCXCTL_SYSROOT": str(fake.root)})
    assert res.exit_code == load["exit_code"], res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("scxctl: error:")]
    assert errors == [f"scxctl: error: {load['error']}"]
