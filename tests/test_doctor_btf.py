"""The BTF readers (scxctl.bpf.btf) and the kernel.btf check.

Real BTF comes from two producers checked against bpftool as the oracle: the running kernel's
/sys/kernel/btf/vmlinux and a C file compiled by clang -g -target bpf. Hand-built blobs (every
kind, both byte orders) and corrupt/truncated ones cover what real producers never emit.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from fakeroot import SCHED_EXT_OPS_MEMBERS, BtfBuilder, FakeRoot, context, every_kind_btf

from scxctl.bpf.btf import Btf, BTFError, Kind, find_struct, parse_header
from scxctl.doctor import checks_btf
from scxctl.doctor.model import Status

VMLINUX = Path("/sys/kernel/btf/vmlinux")
TESTS = Path(__file__).resolve().parent
CLANG = shutil.which("clang-19") or shutil.which("clang")
OBJCOPY = shutil.which("llvm-objcopy-19") or shutil.which("llvm-objcopy")
BPFTOOL = shutil.which("bpftool") or shutil.which("bpftool", path="/usr/sbin:/sbin")

C_SOURCE = r"""
struct task_struct { int pid; int tgid; };
struct sched_ext_ops {
    int (*select_cpu)(struct task_struct *p, int prev_cpu, unsigned long long wake_flags);
    void (*enqueue)(struct task_struct *p, unsigned long long enq_flags);
    void (*dispatch)(int cpu, struct task_struct *prev);
    unsigned long long flags;
    unsigned int timeout_ms;
    char name[128];
};
enum scx_big { SCX_BIG = 1ULL << 40 };
union u { int i; float f; };
typedef unsigned int u32;
int __attribute__((btf_decl_tag("ctx"))) helper(volatile const u32 *restrict x, union u y, enum scx_big b)
{ return (int)*x + y.i + (int)b; }
struct sched_ext_ops pyland_ops __attribute__((section(".struct_ops.link"))) = {
    .flags = 1, .name = "pyland" };
int counter;
double ratio = 0.5;
"""


def bpftool_types(path: Path) -> list[dict]:
    assert BPFTOOL, "bpftool is installed by scripts/install.sh"
    out = subprocess.run([BPFTOOL, "-j", "btf", "dump", "file", str(path)], check=True, capture_output=True)
    return json.loads(out.stdout)["types"]


def as_rows(btf: Btf) -> list[tuple[int, str, str]]:
    return [(t.id, t.kind.name, t.name or "(anon)") for t in btf.types()]


@pytest.fixture(scope="module")
def vmlinux_oracle() -> list[dict]:
    return bpftool_types(VMLINUX)


# real BTF, bpftool as the oracle

def test_vmlinux_walk_matches_bpftool(vmlinux_oracle: list[dict]) -> None:
    btf = Btf.from_file(VMLINUX)
    oracle = vmlinux_oracle
    types = list(btf.types())
    assert [(t.id, t.kind.name, t.name or "(anon)") for t in types] == [
        (t["id"], t["kind"], t["name"]) for t in oracle
    ]
    vlens = {t["id"]: t["vlen"] for t in oracle if "vlen" in t}
    assert {t.id: t.vlen for t in types if t.id in vlens} == vlens
    assert btf.nr_types == len(oracle)


def test_vmlinux_sched_ext_ops_presence_agrees_with_bpftool(vmlinux_oracle: list[dict]) -> None:
    oracle = any(t["kind"] == "STRUCT" and t["name"] == "sched_ext_ops" for t in vmlinux_oracle)
    assert (find_struct(VMLINUX.read_bytes(), "sched_ext_ops") is not None) == oracle
    task = find_struct(VMLINUX.read_bytes(), "task_struct")
    assert task is not None and "pid" in task.members and "tgid" in task.members


@pytest.fixture(scope="module")
def clang_btf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert CLANG and OBJCOPY, "clang-19 and llvm-19 are installed by scripts/install.sh"
    d = tmp_path_factory.mktemp("clangbtf")
    (d / "ops.c").write_text(C_SOURCE)
    subprocess.run([CLANG, "-g", "-O2", "-target", "bpf", "-c", str(d / "ops.c"), "-o", str(d / "ops.o")],
                   check=True)
    subprocess.run([OBJCOPY, f"--dump-section=.BTF={d / 'ops.btf'}", str(d / "ops.o")], check=True)
    return d / "ops.btf"


def test_clang_btf_has_sched_ext_ops_with_its_members(clang_btf: Path) -> None:
    ops = find_struct(clang_btf.read_bytes(), "sched_ext_ops")
    assert ops is not None
    assert ops.members == ("select_cpu", "enqueue", "dispatch", "flags", "timeout_ms", "name")
    assert ops.size_or_type == 3 * 8 + 8 + 4 + 128 + 4  # three pointers, u64, u32, name, tail padding


def test_clang_btf_walk_matches_bpftool(clang_btf: Path) -> None:
    btf = Btf.from_file(clang_btf)
    oracle = bpftool_types(clang_btf)
    assert as_rows(btf) == [(t["id"], t["kind"], t["name"]) for t in oracle]
    kinds = {t.kind for t in btf.types()}
    # the C file makes clang emit these kinds; each has its own trailer size
    assert {Kind.STRUCT, Kind.UNION, Kind.ENUM64, Kind.FUNC_PROTO, Kind.FUNC, Kind.VAR, Kind.DATASEC,
            Kind.DECL_TAG, Kind.ARRAY, Kind.FLOAT, Kind.INT, Kind.PTR} <= kinds


# hand-built blobs

@pytest.mark.parametrize("byteorder", ["<", ">"])
def test_every_kind_blob_finds_the_struct_after_all_kinds(byteorder: str) -> None:
    blob = every_kind_btf(with_ops=True, byteorder=byteorder)
    btf = Btf(blob)
    assert btf.header.byteorder == byteorder
    assert {t.kind for t in btf.types()} == set(Kind) - {Kind.UNKN}
    ops = btf.find(Kind.STRUCT, "sched_ext_ops")
    assert ops is not None
    assert ops.id == btf.nr_types  # it is the last record: every trailer before it was sized right
    assert ops.members == SCHED_EXT_OPS_MEMBERS


def test_name_elsewhere_is_not_the_struct() -> None:
    """FUNC, VAR, DECL_TAG and DATASEC names mention sched_ext_ops; only a STRUCT counts."""
    blob = every_kind_btf(with_ops=False)
    assert b"sched_ext_ops\0" in blob  # a substring search would say yes
    assert find_struct(blob, "sched_ext_ops") is None
    btf = Btf(blob)
    assert btf.find(Kind.VAR, "sched_ext_ops") is not None
    assert btf.find(Kind.FWD, "sched_ext_ops_fwd") is not None


def test_member_named_like_the_struct_is_not_the_struct() -> None:
    b = BtfBuilder()
    u32 = b.int_("unsigned int")
    b.struct("holder", 4, [("sched_ext_ops", u32, 0)])
    assert find_struct(b.build(), "sched_ext_ops") is None


def _with_header(blob: bytes, **fields: int) -> bytes:
    names = ["magic", "version", "flags", "hdr_len", "type_off", "type_len", "str_off", "str_len"]
    values = dict(zip(names, struct.unpack_from("<HBBIIIII", blob), strict=True))
    values.update(fields)
    return struct.pack("<HBBIIIII", *(values[n] for n in names)) + blob[24:]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:10], "truncated"),
        (lambda b: b"\x00\x00" + b[2:], "bad magic"),
        (lambda b: _with_header(b, version=2), "version 2"),
        (lambda b: _with_header(b, hdr_len=16), "header length"),
        (lambda b: _with_header(b, hdr_len=len(b) + 1), "header length"),
        (lambda b: _with_header(b, type_len=len(b)), "type section"),
        (lambda b: _with_header(b, str_len=len(b)), "string section"),
        (lambda b: _with_header(b, type_off=2), "aligned"),
        (lambda b: b[: len(b) - 1], "string section"),  # cut inside the strings
        (lambda b: b[:-1] + b"x", "NUL-terminated"),
    ],
)
def test_corrupt_headers_raise_btferror(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BTFError, match=message):
        Btf(mutate(every_kind_btf()))


def test_unknown_header_fields_must_be_zero() -> None:
    blob = every_kind_btf()
    types_and_strings = blob[24:]
    longer = _with_header(blob, hdr_len=32)[:24] + struct.pack("<II", 7, 7) + types_and_strings
    with pytest.raises(BTFError, match="non-zero"):
        Btf(longer)
    zeroed = _with_header(blob, hdr_len=32)[:24] + bytes(8) + types_and_strings
    assert find_struct(zeroed, "sched_ext_ops") is not None


def test_unknown_kind_is_an_error() -> None:
    b = BtfBuilder()
    b.int_("int")
    b.raw("mystery", 25, 0, 0)
    with pytest.raises(BTFError, match="unknown kind 25"):
        list(Btf(b.build()).types())


def test_vlen_past_the_end_is_an_error() -> None:
    b = BtfBuilder()
    u32 = b.int_("unsigned int")
    b.raw("sched_ext_ops", Kind.STRUCT, 3, 8, struct.pack("<III", b.name("a"), u32, 0))  # 1 of 3 members
    with pytest.raises(BTFError, match="runs past the end"):
        find_struct(b.build(), "sched_ext_ops")


def test_record_truncated_in_the_middle_is_an_error() -> None:
    b = BtfBuilder()
    b.int_("int")
    blob = b.build()
    # declare 8 more bytes of types than the records hold: they are the start of the string section
    hdr = parse_header(blob)
    cut = _with_header(blob, type_len=hdr.type_len + 8, str_off=hdr.str_off + 8)
    cut = cut[: 24 + hdr.type_len] + b"\0" * 8 + cut[24 + hdr.type_len :]
    with pytest.raises(BTFError, match="truncated"):
        list(Btf(cut).types())


def test_name_offset_out_of_range_is_an_error() -> None:
    b = BtfBuilder()
    b.raw("", Kind.INT, 0, 4, struct.pack("<I", 32))
    blob = bytearray(b.build())
    struct.pack_into("<I", blob, 24, 10_000)  # name_off of type 1
    with pytest.raises(BTFError, match="name offset"):
        list(Btf(bytes(blob)).types())


def test_random_corruption_gives_btferror_or_a_result_never_a_crash() -> None:
    blob = every_kind_btf()
    rng = random.Random(20240605)
    outcomes = {"found": 0, "none": 0, "error": 0}
    for _ in range(400):
        data = bytearray(blob)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cut = rng.choice([len(data), rng.randrange(len(data) + 1)])
        try:
            outcomes["found" if find_struct(bytes(data[:cut]), "sched_ext_ops") else "none"] += 1
        except BTFError:
            outcomes["error"] += 1
    assert outcomes["error"] > 0 and outcomes["found"] > 0  # both paths were exercised


# the kernel.btf check

def test_check_ok_with_sched_ext_ops(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    r = checks_btf.kernel_btf(context(fake))
    assert r.status is Status.OK
    assert r.details["sched_ext_ops"]["members"] == list(SCHED_EXT_OPS_MEMBERS)
    assert r.details["nr_types"] == Btf(every_kind_btf()).nr_types


def test_check_fails_without_sched_ext_ops(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).no_sched_ext_machine()
    r = checks_btf.kernel_btf(context(fake))
    assert r.status is Status.FAIL
    assert "no struct sched_ext_ops" in r.finding and r.hint


def test_check_fails_when_btf_missing(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    fake.remove("/sys/kernel/btf/vmlinux")
    r = checks_btf.kernel_btf(context(fake))
    assert (r.status, r.details["present"]) == (Status.FAIL, False)
    assert "CONFIG_DEBUG_INFO_BTF" in (r.hint or "")


@pytest.mark.parametrize("breaker", ["unreadable_dir", "unreadable_loop"])
def test_check_fails_when_btf_unreadable(tmp_path: Path, breaker: str) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    getattr(fake, breaker)("/sys/kernel/btf/vmlinux")
    r = checks_btf.kernel_btf(context(fake))
    assert r.status is Status.FAIL
    assert "cannot read" in r.finding


def test_check_fails_on_garbage(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path).sched_ext_machine()
    fake.write("/sys/kernel/btf/vmlinux", b"sched_ext_ops" * 10)
    r = checks_btf.kernel_btf(context(fake))
    assert r.status is Status.FAIL
    assert "not valid BTF" in r.finding and "bad magic" in r.finding


# Run in a fresh interpreter whose ctypes cannot open libbpf at all: in this process another test may
# already hold libbpf.so.1 (scxctl.bpf.libbpf_api caches it), which would hide a check that needs it.
_WITHOUT_LIBBPF = """
import ctypes, json, sys
from pathlib import Path

class _NoLibbpf(ctypes.CDLL):
    def __init__(self, name, *args, **kwargs):
        if name and "libbpf" in str(name):
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        super().__init__(name, *args, **kwargs)

ctypes.CDLL = _NoLibbpf
sys.path.insert(0, sys.argv[1])
from fakeroot import FakeRoot, context
from scxctl.doctor.runner import run_checks

fake = FakeRoot(Path(sys.argv[2])).sched_ext_machine()
results = run_checks(context(fake, load_library=ctypes.CDLL))
json.dump({r.id: r.to_json() for r in results}, sys.stdout)
"""


def test_check_needs_no_libbpf_so_the_verdict_keeps_the_kernel_apart(tmp_path: Path) -> None:
    """Why scxctl.bpf.btf has a reader of its own: without libbpf.so.1 only pyland is out."""
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_LIBBPF, str(TESTS), str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=True)
    rows = json.loads(proc.stdout)
    assert rows["kernel.btf"]["status"] == "ok"
    assert rows["libbpf"]["status"] == "fail" and "not found" in rows["libbpf"]["finding"]
    verdict = rows["verdict"]
    assert verdict["finding"].startswith("the kernel supports sched_ext, but pyland cannot run here")
    assert (verdict["details"]["can_run_sched_ext"], verdict["details"]["can_run_pyland"]) == (True, False)


# libbpf's parser (scxctl.bpf.btf.btf_struct_members), which pyland's loader asks instead of the
# Python reader for speed, checked against the Python reader on the same blobs


@pytest.mark.skipif(not VMLINUX.exists(), reason="this kernel exposes no /sys/kernel/btf/vmlinux")
def test_libbpf_and_python_readers_agree_on_the_kernels_structs() -> None:
    from scxctl.bpf.btf import btf_struct_members

    for name in ("task_struct", "rq", "cgroup"):
        mine = find_struct(VMLINUX.read_bytes(), name)
        assert mine is not None
        assert btf_struct_members(VMLINUX, name) == mine.members


def test_libbpf_reader_on_hand_built_blobs(tmp_path: Path) -> None:
    from scxctl.bpf.btf import btf_struct_members
    from scxctl.bpf.errors import BpfError

    with_ops, without = tmp_path / "with_ops", tmp_path / "without"
    with_ops.write_bytes(every_kind_btf(with_ops=True))
    without.write_bytes(every_kind_btf(with_ops=False))
    assert btf_struct_members(with_ops, "sched_ext_ops") == SCHED_EXT_OPS_MEMBERS
    assert btf_struct_members(without, "sched_ext_ops") is None
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x9f\xeb" + bytes(40))
    with pytest.raises(BpfError):
        btf_struct_members(garbage, "sched_ext_ops")
    with pytest.raises(OSError):
        btf_struct_members(tmp_path / "missing", "sched_ext_ops")


def test_member_offsets_see_through_anonymous_members(tmp_path: Path) -> None:
    """As C names them: cgroup.ancestors sits in an anonymous union on recent kernels."""
    from scxctl.bpf.btf import btf_member_offsets
    from scxctl.bpf.errors import BpfError

    assert CLANG, "clang-19 is installed by scripts/install.sh"
    src, obj = tmp_path / "anon.c", tmp_path / "anon.o"
    src.write_text("struct outer { int a; union { long b; struct { int c; int d; }; };"
                   " struct { char e; } named; unsigned f : 3; };\nstruct outer x;\n")
    subprocess.run([CLANG, "-target", "bpf", "-g", "-c", str(src), "-o", str(obj)], check=True)
    assert btf_member_offsets(obj, {"outer": ("a", "b", "c", "d", "named")}) == {
        "outer": {"a": 0, "b": 8, "c": 8, "d": 12, "named": 16}}
    for missing in ("e", "f", "nope"):  # e: inside a named member; f: a bitfield
        with pytest.raises(BpfError, match=f"outer.{missing}"):
            btf_member_offsets(obj, {"outer": (missing,)})
    with pytest.raises(BpfError, match="no struct inner"):
        btf_member_offsets(obj, {"inner": ("a",)})
