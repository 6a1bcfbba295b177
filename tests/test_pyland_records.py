"""records.py against the C layouts, read from the BTF that clang emitted for the built objects."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cheader import c_int, defines, enum_values, struct_members

from scxctl.bpf.buildinfo import read_section
from scxctl.pyland import records

ROOT = Path(__file__).resolve().parent.parent
PYLAND_OBJ = ROOT / "bpf" / "build" / "pyland.bpf.o"
LOOP_OBJ = ROOT / "bpf" / "build" / "tests" / "pyland_loop.bpf.o"
BPFTOOL = shutil.which("bpftool") or "/usr/sbin/bpftool"


def btf_types(obj: Path) -> list[dict[str, Any]]:
    if not obj.is_file():
        pytest.fail(f"{obj} missing: run make -C bpf")
    out = subprocess.run([BPFTOOL, "-j", "btf", "dump", "file", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)["types"]


def struct_layout(types: list[dict[str, Any]], name: str) -> tuple[int, list[tuple[str, int]]]:
    t = next(t for t in types if t["kind"] == "STRUCT" and t.get("name") == name)
    return t["size"], [(m["name"], m["bits_offset"] // 8) for m in t["members"]]


def fmt_offsets(fmt: struct.Struct) -> list[int]:
    """Offsets of each field of a '='-format (no padding), by summing the item sizes."""
    offsets, off = [], 0
    for count, code in re.findall(r"(\d*)([a-zA-Z])", fmt.format.lstrip("=")):
        size = struct.calcsize("=" + code) * (int(count) if code == "s" and count else 1)
        reps = 1 if code == "s" else int(count or 1)
        for _ in range(reps):
            offsets.append(off)
            off += size
    return offsets


@pytest.mark.parametrize(("cname", "fmt"),
                         [("pyland_task", records.TASK), ("pyland_decision", records.DECISION)])
def test_record_layout_matches_c(cname: str, fmt: struct.Struct) -> None:
    """records.TASK and records.DECISION are the C structs byte for byte: the same size, a field at
    every member's offset. The members must be bpf/pyland.h's, in its order: the object compared
    against is built from this header, not an older one. (The names Python gives those fields are
    tied to the header by tests/test_policy_api.py.)"""
    size, members = struct_layout(btf_types(LOOP_OBJ), cname)
    assert [m for m, _ in members] == struct_members(cname)
    assert fmt.size == size
    assert [off for _, off in members] == fmt_offsets(fmt)


def test_update_layout_matches_c() -> None:
    """records.UPDATE is struct pyland_update with its struct pyland_params flattened at the end."""
    types = btf_types(LOOP_OBJ)
    size, members = struct_layout(types, "pyland_update")
    _, params = struct_layout(types, "pyland_params")
    assert [m for m, _ in members] == struct_members("pyland_update")
    assert [m for m, _ in params] == struct_members("pyland_params")
    assert members[-1][0] == "params" and records.UPDATE.size == size
    flat = [off for _, off in members[:-1]] + [members[-1][1] + off for _, off in params]
    assert flat == fmt_offsets(records.UPDATE)


def test_shared_state_layout_matches_c() -> None:
    types = btf_types(PYLAND_OBJ)
    size, members = struct_layout(types, "pyland_shared")
    assert size == records.SHARED_SIZE
    assert [m for m, _ in members] == struct_members("pyland_shared")  # built from this header
    assert [m for m, _ in members] == [*records.SHARED_COUNTERS, "exit"]
    assert [off for _, off in members[:-1]] == [8 * i for i in range(len(records.SHARED_COUNTERS))]
    assert members[-1][1] == records.EXIT_OFFSET
    esize, emembers = struct_layout(types, "pyland_exit_info")
    assert esize == records.EXIT_INFO.size
    assert [off for _, off in emembers] == fmt_offsets(records.EXIT_INFO)


def test_cgroup_bw_layout_matches_c() -> None:
    size, members = struct_layout(btf_types(PYLAND_OBJ), "pyland_cgroup_bw")
    assert size == records.CGROUP_BW.size
    assert [m for m, _ in members] == struct_members("pyland_cgroup_bw")  # built from this header
    assert [m for m, _ in members] == list(records.CGROUP_BW_FIELDS)
    assert [off for _, off in members] == fmt_offsets(records.CGROUP_BW)


def test_config_layout_matches_c() -> None:
    size, members = struct_layout(btf_types(PYLAND_OBJ), "pyland_config")
    assert size == records.CONFIG.size
    assert [m for m, _ in members] == struct_members("pyland_config")  # built from this header
    assert [off for _, off in members] == fmt_offsets(records.CONFIG)


@pytest.mark.parametrize(("section", "var_size"),
                         [(".bss", records.SHARED_SIZE), (".rodata", records.CONFIG.size)])
def test_shared_and_config_are_alone_at_offset_zero(section: str, var_size: int) -> None:
    """Python addresses .bss/.rodata at offset 0: another global there would shift everything."""
    types = btf_types(PYLAND_OBJ)
    sec = next(t for t in types if t["kind"] == "DATASEC" and t["name"] == section)
    assert [(v["offset"], v["size"]) for v in sec["vars"]] == [(0, var_size)]


def helper_id(name: str) -> int:
    """A BPF helper's number (what `call` shows in the disassembly), from the committed vmlinux.h."""
    m = re.search(rf"\bBPF_FUNC_{name} = (\d+),", (ROOT / "bpf/vmlinux.h").read_text())
    assert m, f"BPF_FUNC_{name} is not in bpf/vmlinux.h"
    return int(m.group(1))


def test_nr_queued_is_counted_before_the_record_is_submitted() -> None:
    """R1 in the compiled code: the atomic add on shared.nr_queued precedes bpf_ringbuf_submit in
    send_to_policy, the one function that submits to `queued` (a subprogram of its own)."""
    objdump = shutil.which("llvm-objdump-19") or shutil.which("llvm-objdump")
    assert objdump, "llvm-objdump is part of the build toolchain (llvm-19)"
    text = subprocess.run([objdump, "-dr", "--no-show-raw-insn", "--disassemble-symbols=send_to_policy",
                           str(PYLAND_OBJ)], capture_output=True, text=True, check=True).stdout
    lines = text.splitlines()
    assert any("queued" in ln for ln in lines), "send_to_policy must reserve in `queued`"
    submit = [i for i, ln in enumerate(lines) if f"call {helper_id('ringbuf_submit'):#x}" in ln]
    assert submit, "send_to_policy must submit records"
    # an atomic add (plain, or fetch-and-add where the new count is used) at offset 0 of a pointer
    # loaded, a few instructions earlier, from the `shared` relocation: nr_queued
    counted = [
        i for i, ln in enumerate(lines)
        if ("lock *(u64 *)" in ln or "atomic_fetch_add((u64 *)" in ln) and "+ 0x0)" in ln
        and "shared" in "\n".join(lines[max(0, i - 6):i])
    ]
    assert counted, "no atomic increment of shared.nr_queued in enqueue"
    assert counted[0] < submit[0], "bpf_ringbuf_submit comes before the increment of nr_queued"


def test_the_object_has_no_config_values_of_its_own() -> None:
    """Every .rodata value comes from `scxctl run`'s options (open_configured writes them all:
    test_pyland_config_layout.py), so the C side holds none that could differ from them."""
    raw = read_section(PYLAND_OBJ, ".rodata")
    assert raw is not None and len(raw) >= records.CONFIG.size
    assert not any(raw[: records.CONFIG.size])


def test_ops_name_and_both_struct_ops_maps_exist() -> None:
    types = btf_types(PYLAND_OBJ)
    sec = next(t for t in types if t["kind"] == "DATASEC" and t["name"] == ".struct_ops.link")
    by_id = {t["id"]: t for t in types}
    names = sorted(by_id[v["type_id"]]["name"] for v in sec["vars"])
    assert names == ["pyland_ops", "pyland_partial_ops"]
    data = read_section(PYLAND_OBJ, ".struct_ops.link")
    assert data is not None and data.count(records.OPS_NAME.encode() + b"\0") == 2


def test_constants_are_the_headers() -> None:
    """records.py's constants are pyland.h's `#define PYLAND_<name>` and enum pyland_compat, read
    from the header itself."""
    macros = defines("PYLAND_")
    shared = {name for name in vars(records) if name.isupper() and name in macros}
    assert {"OPS_NAME", "DECISION_PREEMPT", "PARAM_SYNC", "REC_REPORT", "EXIT_STALLED"} <= shared
    for name in shared:
        mine = getattr(records, name)
        theirs = macros[name].strip('"') if isinstance(mine, str) else c_int(macros[name])
        assert mine == theirs, name
    compat = enum_values("pyland_compat")
    assert sorted(records.COMPAT_MISSING) == sorted(compat.values())
    assert compat["PYLAND_NO_CGROUP_BW"] == records.COMPAT_NO_CGROUP_BW
