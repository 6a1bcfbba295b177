"""`scxctl doctor`'s trial load of the pyland object on a real sched_ext kernel (QEMU guest), one boot.

The guest runs doctor on the object `make -C bpf` built (it must load, and loading must switch no
scheduler), then on a pyland variant with one kfunc extern whose prototype no kernel has (built
here from bpf/tests/pyland_bad_kfunc.h): doctor must fail with the reason `scxctl run` then prints
when it exits 7 on that same object. An unprivileged doctor must not try the load at all.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

# single-threaded TCG: nothing here depends on the vCPUs running side by side
pytestmark = [pytest.mark.vm, pytest.mark.tcg_single]

ROOT = Path(__file__).resolve().parent.parent
BAD_OUT = "build/tests/pyland_bad_kfunc"  # relative to bpf/, as bpf/Makefile's OUT must be
BAD_GUEST = f"/opt/scxctl/bpf/{BAD_OUT}/pyland.bpf.o"

SCRIPT = rf"""#!/bin/bash
set -u
R=/results
S=/sys/kernel/sched_ext
uname -r >"$R/release.txt"
cat $S/enable_seq >"$R/enable_seq.before"
scxctl doctor --json >"$R/doctor.json" 2>"$R/doctor.err"; echo $? >"$R/doctor.rc"
cat $S/enable_seq >"$R/enable_seq.after"
cat $S/state >"$R/state.after"
cat $S/root/ops >"$R/ops.after" 2>/dev/null
SCXCTL_BPF_OBJECT={BAD_GUEST} scxctl doctor --json >"$R/bad.json" 2>"$R/bad.err"; echo $? >"$R/bad.rc"
scxctl run --bpf-object {BAD_GUEST} --stats-interval 0 >"$R/run_bad.out" 2>&1; echo $? >"$R/run_bad.rc"
runuser -u tester -- scxctl doctor --json >"$R/tester.json" 2>"$R/tester.err"
exit 0
"""


def build_objects() -> None:
    """The current pyland object and its broken variant. The variant is pyland's own build with the
    extern force-included (-include): the same flags, and build metadata matching the bpf/ sources,
    so doctor's freshness check lets it through to the load. -B: the header is no make dependency."""
    if shutil.which("make") is None:
        pytest.fail("make is needed to build the BPF objects (scripts/install.sh installs it)")
    subprocess.run(["make", "-s", "-C", str(ROOT / "bpf")], check=True)
    clang = shutil.which("clang-19") or shutil.which("clang")
    header = ROOT / "bpf" / "tests" / "pyland_bad_kfunc.h"
    subprocess.run(["make", "-s", "-B", "-C", str(ROOT / "bpf"), f"OUT={BAD_OUT}",
                    f"CLANG={clang} -include {header}", f"{BAD_OUT}/pyland.bpf.o"], check=True)


@pytest.fixture(scope="module")
def guest(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    build_objects()
    script = tmp_path_factory.mktemp("doctor_load") / "doctor_load.sh"
    script.write_text(SCRIPT)
    res = vm.run("bash /tmp/doctor_load.sh", timeout=600, copy=[(str(script), "/tmp/doctor_load.sh")])
    assert res.returncode == 0, f"guest run failed ({res.message}): {res.output[-3000:]}"
    return res.results


def _checks(path: Path) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in json.loads(path.read_text())["checks"]}


def _text(guest: Path, name: str) -> str:
    return (guest / name).read_text().strip() if (guest / name).exists() else ""


def test_doctor_loads_the_pyland_object_on_the_guest_kernel(guest: Path) -> None:
    release = _text(guest, "release.txt")
    checks = _checks(guest / "doctor.json")
    obj = checks["bpf.object"]
    assert obj["status"] == "ok", (obj["finding"], _text(guest, "doctor.err")[-2000:])
    assert obj["details"]["fresh"] is True
    assert obj["details"]["load"] == {"attempted": True, "ok": True, "kernel": release, "error": None}
    assert f"loaded on this kernel ({release})" in obj["finding"]
    assert checks["verdict"]["status"] == "ok" and _text(guest, "doctor.rc") == "0"


def test_the_trial_load_switches_no_scheduler(guest: Path) -> None:
    assert _text(guest, "enable_seq.after") == _text(guest, "enable_seq.before")
    assert _text(guest, "state.after") == "disabled"
    assert _text(guest, "ops.after") == ""


def test_doctor_predicts_the_refusal_run_hits(guest: Path) -> None:
    release = _text(guest, "release.txt")
    checks = _checks(guest / "bad.json")
    obj = checks["bpf.object"]
    load = obj["details"]["load"]
    assert obj["status"] == "fail" and obj["details"]["chosen"] == BAD_GUEST, obj["finding"]
    assert (load["attempted"], load["ok"], load["kernel"], load["exit_code"]) == (True, False, release, 7)
    assert "extern (func ksym) 'scx_bpf_nr_cpu_ids___pyland_bad': func_proto" in load["error"]
    assert "incompatible with vmlinux" in load["error"]
    assert obj["finding"].endswith(f"does not load on this kernel ({release}): {load['error']}")
    assert f"does not support kernel {release}" in obj["hint"]
    verdict = checks["verdict"]
    assert verdict["status"] == "fail" and verdict["details"]["can_run_pyland"] is False
    assert load["error"] in verdict["finding"]
    assert _text(guest, "bad.rc") == "1"
    run_out = _text(guest, "run_bad.out")
    assert _text(guest, "run_bad.rc") == "7", run_out[-2000:]
    assert f"scxctl: error: {load['error']}" in run_out.splitlines(), run_out[-2000:]


def test_an_unprivileged_doctor_does_not_try(guest: Path) -> None:
    obj = _checks(guest / "tester.json")["bpf.object"]
    assert obj["details"]["load"]["attempted"] is False, obj["finding"]
    assert obj["details"]["load"]["reason"].startswith("not privileged")
