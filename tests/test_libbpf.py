"""scxctl.bpf's libbpf modules (libbpf_api, libbpf, errors, verifier_log) against the real kernel:
open, rodata, load, live .bss, test runs, errors.

The objects come from bpf/tests/*.bpf.c (built by `make -C bpf/tests`). Needs root (BPF) and
libbpf >= 1.4, both installed by scripts/install.sh; no sched_ext needed.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from scxctl import log as logsetup
from scxctl.bpf.errors import BpfError, error_for_errno
from scxctl.bpf.libbpf import BpfObject, map_info
from scxctl.bpf.libbpf_api import (
    BPF_MAP_TYPE_RINGBUF,
    BPF_MAP_TYPE_USER_RINGBUF,
    MIN_VERSION,
    libbpf_version,
    libbpf_version_string,
)
from scxctl.bpf.verifier_log import log_tail, verifier_reason
from scxctl.errors import ExitCode
from scxctl.sysfs import SysRoot

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "bpf" / "build" / "tests"


def build_test_objects() -> None:
    """make -C bpf/tests; in the VM guest (no toolchain) the copied tree already holds the objects."""
    if shutil.which("make"):
        subprocess.run(["make", "-s", "-C", str(ROOT / "bpf" / "tests")], check=True)


@pytest.fixture(scope="session")
def objs() -> Path:
    build_test_objects()
    return BUILD


def fake_sysroot(tmp_path: Path, sched_ext: bool, ops: str | None = None) -> SysRoot:
    if sched_ext:
        d = tmp_path / "sys/kernel/sched_ext"
        d.mkdir(parents=True)
        (d / "state").write_text("enabled\n" if ops else "disabled\n")
        if ops:
            (d / "root").mkdir()
            (d / "root/ops").write_text(ops + "\n")
    else:
        (tmp_path / "sys/kernel").mkdir(parents=True)
    return SysRoot(tmp_path)


def test_version_is_supported_and_consistent() -> None:
    major, minor = libbpf_version()
    assert (major, minor) >= MIN_VERSION
    assert libbpf_version_string().startswith(f"v{major}.{minor}")


def test_open_load_and_lookups(objs: Path) -> None:
    with BpfObject.open(objs / "ringbuf_test.bpf.o") as obj:
        ring, uring = obj.map("ring"), obj.map("uring")
        with pytest.raises(BpfError, match="no fd"):
            _ = ring.fd  # maps exist in the kernel only after load
        assert (ring.type, uring.type) == (BPF_MAP_TYPE_RINGBUF, BPF_MAP_TYPE_USER_RINGBUF)
        assert ring.max_entries == uring.max_entries == 16384
        obj.load()
        assert obj.loaded
        info = map_info(ring.fd)
        assert (info.type, info.max_entries, info.name) == (BPF_MAP_TYPE_RINGBUF, 16384, b"ring")
        assert obj.program("produce").fd >= 0 and obj.program("drain").fd >= 0
        assert {m.name for m in obj.maps()} >= {"ring", "uring"}
        with pytest.raises(BpfError, match="'nope' not found"):
            obj.map("nope")
        with pytest.raises(BpfError, match="'nope' not found"):
            obj.program("nope")
        with pytest.raises(BpfError, match="not found"):
            obj.attach_struct_ops("nope")
    with pytest.raises(BpfError, match="closed"):
        obj.map("ring")


def test_rodata_before_load_and_live_globals_after(objs: Path) -> None:
    q = struct.Struct("=Q")
    with BpfObject.open(objs / "globals.bpf.o") as obj:
        assert q.unpack_from(obj.rodata())[0] == 1  # the compiled-in default
        obj.set_rodata_bytes(0, q.pack(3))
        with pytest.raises(BpfError, match="out of range"):
            obj.set_rodata_bytes(4, q.pack(0))
        obj.load()
        with pytest.raises(BpfError, match="frozen"):
            obj.rodata()
        ro = obj.map(".rodata").initial_value()
        assert ro.readonly and q.unpack_from(ro)[0] == 3
        bss = obj.map(".bss").initial_value()
        data = obj.map(".data").initial_value()
        prog = obj.program("mul")
        assert prog.test_run(q.pack(5)) == 5 * 3 + 7
        assert struct.unpack_from("=QQ", bss) == (1, 22)  # the program's writes, seen live
        q.pack_into(data, 0, 100)  # and ours, seen by the program
        assert prog.test_run(q.pack(2)) == 2 * 3 + 100
        assert struct.unpack_from("=QQ", bss) == (2, 106)


def test_missing_object_file(tmp_path: Path) -> None:
    with pytest.raises(BpfError) as ei:
        BpfObject.open(tmp_path / "absent.bpf.o")
    assert ei.value.code == ExitCode.BPF
    assert str(tmp_path / "absent.bpf.o") in ei.value.message


def test_verifier_rejection_carries_the_log(objs: Path) -> None:
    with BpfObject.open(objs / "bad_oob.bpf.o") as obj, pytest.raises(BpfError) as ei:
        obj.load()
    err = ei.value
    assert err.code == ExitCode.BPF
    assert err.errno == errno.EACCES
    assert "verifier rejected" in err.message
    assert "invalid access to map value" in err.message  # the reason, not the statistics line
    assert "\n" not in err.message  # the CLI prints one line
    assert "off=32" in err.log and err.hint is not None and "off=32" in err.hint


def test_rejection_without_kernel_log_buffer_is_still_a_bpf_error(objs: Path) -> None:
    with BpfObject.open(objs / "bad_oob.bpf.o", kernel_log=False) as obj, pytest.raises(BpfError) as ei:
        obj.load()
    assert ei.value.code == ExitCode.BPF and ei.value.errno == errno.EACCES


def test_struct_ops_on_kernel_without_the_type_is_unsupported(objs: Path, tmp_path: Path) -> None:
    # libbpf cannot find the struct_ops type in kernel BTF, as for sched_ext_ops without sched_ext
    sysroot = fake_sysroot(tmp_path, sched_ext=False)
    with BpfObject.open(objs / "fake_ops.bpf.o", sysroot=sysroot) as obj, pytest.raises(BpfError) as ei:
        obj.load()
    assert ei.value.code == ExitCode.UNSUPPORTED
    assert "cannot run sched_ext" in ei.value.message
    assert "scxctl_test_missing_ops is not found in kernel BTF" in ei.value.message


def test_struct_ops_type_missing_on_a_sched_ext_kernel_is_unsupported_too(objs: Path, tmp_path: Path) -> None:
    sysroot = fake_sysroot(tmp_path, sched_ext=True)
    with BpfObject.open(objs / "fake_ops.bpf.o", sysroot=sysroot) as obj, pytest.raises(BpfError) as ei:
        obj.load()
    assert ei.value.code == ExitCode.UNSUPPORTED
    assert "does not support this sched_ext scheduler" in ei.value.message


@pytest.mark.parametrize("err", [errno.EBUSY, errno.EEXIST])
def test_attach_busy_names_the_loaded_scheduler(tmp_path: Path, err: int) -> None:
    sysroot = fake_sysroot(tmp_path, sched_ext=True, ops="scx_rusty")
    e = error_for_errno(err, "attaching 'pyland_ops'", struct_ops=True, sysroot=sysroot)
    assert e.code == ExitCode.BUSY
    assert e.message == "another sched_ext scheduler is loaded: scx_rusty"


def test_errno_mapping() -> None:
    assert error_for_errno(errno.EPERM, "loading x").code == ExitCode.PERMISSION
    # EPERM with a verifier log is the verifier talking, not missing privileges
    verifier_log = "0: (b7) r0 = 0\nR0 leaks addr\n"
    assert error_for_errno(errno.EPERM, "loading x", log=verifier_log).code == ExitCode.BPF
    assert error_for_errno(errno.EINVAL, "loading x").code == ExitCode.BPF
    assert error_for_errno(errno.EBUSY, "map op").code == ExitCode.BPF  # only struct_ops attach is BUSY


def test_verifier_reason_skips_instructions_and_statistics() -> None:
    log = ("7: (15) if r0 == 0x0 goto pc+1\n8: (79) r6 = *(u64 *)(r0 +32)\n"
           "bad access\nprocessed 8 insns (limit)\n")
    assert verifier_reason(log) == "bad access"


# the end of kernel 7.3's log for bad_oob.bpf.o (recorded in the VM guest): an extended diagnostic,
# with its own instruction lines, follows the classic complaint after a blank line
LOG_7X = """\
7: (15) if r0 == 0x0 goto pc+1        ; R0=map_value(map=small,ks=4,vs=8)
8: (79) r6 = *(u64 *)(r0 +32)
invalid access to map value, value_size=8 off=32 size=8
R0 min value is outside of the allowed memory range

Verification failed: Memory Safety: Access outside bounds

Reason:
  The verifier cannot prove offset + access_size <= object_size.

At:
  oob @ bad_oob.bpf.c:25:14
  Instruction context:
  >>>  8 | (79) r6 = *(u64 *)(r0 +32)
       9 | (bf) r0 = r6

Suggestion:
  Add or adjust a bounds check that proves offset + access_size stays within the object.

processed 8 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0
"""


def test_verifier_reason_of_a_kernel_7x_extended_log() -> None:
    assert verifier_reason(LOG_7X) == (
        "invalid access to map value, value_size=8 off=32 size=8; "
        "R0 min value is outside of the allowed memory range"
    )
    tail = log_tail(LOG_7X)
    assert "off=32" in tail and "Verification failed: Memory Safety" in tail
    assert "The verifier cannot prove" in tail and "Suggestion" not in tail


def test_without_capabilities_load_is_permission_denied(objs: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop capabilities from (the suite runs as root: scripts/test.sh)")
    code = (
        "import sys\n"
        "from scxctl.bpf.errors import BpfError\n"
        "from scxctl.bpf.libbpf import BpfObject\n"
        "try:\n"
        f"    BpfObject.open({str(objs / 'globals.bpf.o')!r}).load()\n"
        "except BpfError as e:\n"
        "    print(e.message); sys.exit(int(e.code))\n"
    )
    proc = subprocess.run(
        ["setpriv", "--bounding-set=-all", "--inh-caps=-all", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert proc.returncode == int(ExitCode.PERMISSION), proc.stdout + proc.stderr
    assert "permission denied" in proc.stdout


def test_libbpf_messages_go_to_structlog_at_debug(objs: Path) -> None:
    stream = io.StringIO()
    logsetup.configure("json", logging.DEBUG, stream=stream)
    try:
        with BpfObject.open(objs / "globals.bpf.o") as obj:
            obj.load()
    finally:
        logsetup.configure()
    events = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    libbpf_events = [e for e in events if e.get("logger") == "scxctl.libbpf"]
    assert libbpf_events, stream.getvalue()[:2000]
    assert all(e["level"] == "debug" for e in libbpf_events)
    assert any("globals" in e["msg"] for e in libbpf_events)  # formatted through vsnprintf


def test_a_kfunc_without_its_impl_entry_is_named_as_a_kernel_defect() -> None:
    # the log a Debian 7.2.12 kernel gives pyland: its BTF has scx_bpf_error_bstr with the `aux`
    # argument but no scx_bpf_error_bstr_impl, so no program can call the kfunc there
    log = ("cannot find function scx_bpf_error_bstr_impl in BTF\n"
           "kernel function btf_id 104453 does not have a valid func_proto\n"
           "processed 0 insns (limit 1000000)\n")
    e = error_for_errno(errno.EINVAL, "loading pyland.bpf.o failed", log=log)
    assert e.code == ExitCode.UNSUPPORTED
    assert "cannot call the kfunc scx_bpf_error_bstr:" in e.message
    assert "no scx_bpf_error_bstr_impl" in e.message
    # any other verifier complaint stays a verifier rejection
    other = error_for_errno(errno.EINVAL, "loading x", log="0: (85) call foo\nR1 must be a rcu pointer\n")
    assert other.code == ExitCode.BPF and "R1 must be a rcu pointer" in other.message
