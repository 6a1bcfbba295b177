"""`scxctl doctor` on a real sched_ext kernel (QEMU guest): one boot, several small assertions.

The guest runs doctor with nothing loaded, then again while pyland is attached, and copies its
kernel BTF out so the host-side parser is checked against bpftool on a BTF that *has* sched_ext_ops.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scxctl.bpf.btf import Btf, Kind

# single-threaded TCG: nothing here depends on the vCPUs running side by side
pytestmark = [pytest.mark.vm, pytest.mark.tcg_single]

SCRIPT = r"""#!/bin/bash
set -u
R=/results
scxctl doctor --json >"$R/doctor.json" 2>"$R/doctor.err"; echo $? >"$R/doctor.rc"
scxctl doctor >"$R/doctor.txt" 2>&1; echo $? >"$R/doctor_table.rc"
cp /sys/kernel/btf/vmlinux "$R/vmlinux.btf"
cat /sys/kernel/sched_ext/state >"$R/state.txt"
# with pyland attached: doctor must recognise it as ours
scxctl --log-format json run --stats-interval 0 >"$R/run.log" 2>&1 &
pid=$!
for _ in $(seq 1 900); do
    [ "$(cat /sys/kernel/sched_ext/root/ops 2>/dev/null)" = pyland ] && break
    sleep 0.1
done
cat /sys/kernel/sched_ext/root/ops >"$R/ops.txt" 2>&1
scxctl doctor --json >"$R/doctor_loaded.json" 2>"$R/doctor_loaded.err"; echo $? >"$R/doctor_loaded.rc"
kill -TERM $pid; wait $pid
exit 0
"""


@pytest.fixture(scope="module")
def guest(vm: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("doctor") / "doctor.sh"
    script.write_text(SCRIPT)
    res = vm.run("bash /tmp/doctor.sh", timeout=600, copy=[(str(script), "/tmp/doctor.sh")])
    assert res.returncode == 0, f"guest run failed ({res.message}): {res.output[-3000:]}"
    return res.results


def _checks(path: Path) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in json.loads(path.read_text())["checks"]}


def test_sched_ext_checks_pass_on_a_sched_ext_kernel(guest: Path) -> None:
    checks = _checks(guest / "doctor.json")
    for cid in ("kernel.config_sched_ext", "kernel.sched_ext_sysfs", "sched_ext.state", "sched_ext.loaded",
                "kernel.btf", "privileges", "bpf.syscall", "libbpf"):
        assert checks[cid]["status"] == "ok", (cid, checks[cid]["finding"])
    assert checks["sched_ext.state"]["details"]["state"] == (guest / "state.txt").read_text().strip()
    assert checks["kernel.btf"]["details"]["sched_ext_ops"]["members"][:2] == ["select_cpu", "enqueue"]
    assert checks["verdict"]["status"] == "ok"


def test_exit_code_follows_the_failures(guest: Path) -> None:
    doc = json.loads((guest / "doctor.json").read_text())
    rc = int((guest / "doctor.rc").read_text())
    assert rc == (1 if doc["summary"]["fail"] else 0)
    assert int((guest / "doctor_table.rc").read_text()) == rc


def test_table_says_it_can_run(guest: Path) -> None:
    text = " ".join((guest / "doctor.txt").read_text().split())
    assert "Verdict: this machine can run sched_ext schedulers and pyland" in text


def test_loaded_pyland_is_recognised_as_ours(guest: Path) -> None:
    assert (guest / "ops.txt").read_text().strip() == "pyland", (guest / "run.log").read_text()[-2000:]
    checks = _checks(guest / "doctor_loaded.json")
    loaded = checks["sched_ext.loaded"]
    assert (loaded["status"], loaded["details"]["ops"], loaded["details"]["ours"]) == ("ok", "pyland", True)
    assert checks["sched_ext.state"]["details"]["state"] == "enabled"


def test_host_parser_agrees_with_bpftool_on_the_guest_kernel_btf(guest: Path) -> None:
    blob = guest / "vmlinux.btf"
    btf = Btf.from_file(blob)
    ops = btf.find(Kind.STRUCT, "sched_ext_ops")
    assert ops is not None
    bpftool = shutil.which("bpftool") or shutil.which("bpftool", path="/usr/sbin:/sbin")
    assert bpftool, "bpftool is installed by scripts/install.sh"
    oracle = json.loads(subprocess.run([bpftool, "-j", "btf", "dump", "file", str(blob)], check=True,
                                       capture_output=True).stdout)["types"]
    mine = next(t for t in oracle if t["kind"] == "STRUCT" and t["name"] == "sched_ext_ops")
    assert (ops.id, ops.vlen, ops.size_or_type) == (mine["id"], mine["vlen"], mine["size"])
    assert list(ops.members) == [m["name"] for m in mine["members"]]
    assert btf.nr_types == len(oracle)
