"""Build metadata of the pyland BPF object: the one source hash, and reading it back from the ELF.

`make -C bpf` runs `python -m scxctl.bpf.buildinfo json` and embeds the JSON into the object as a
non-loadable ELF section (`.pyland.buildinfo`, which libbpf skips). `scxctl run` and the doctor
check recompute the hash from the checkout with the same function: an object whose embedded hash
differs from its sources is stale -- the trap of running an old object from another path than the
one the build wrote cannot go unnoticed.

Stdlib only: the Makefile runs this module before anything else is installed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SECTION = ".pyland.buildinfo"  # in the BPF object
WORKER_SECTION = ".scxctl.buildinfo"  # in the bench worker (native/Makefile)
SCHEMA = 1


def source_files(bpf_dir: Path) -> list[Path]:
    """The hash inputs: the C sources and headers (vmlinux.h included) and the Makefile (flags).

    Used for bpf/ (the BPF object) and native/ (the bench worker); subdirectories are not inputs."""
    files = [*bpf_dir.glob("*.c"), *bpf_dir.glob("*.h"), bpf_dir / "Makefile"]
    return sorted(f for f in files if f.is_file())


def source_hash(bpf_dir: Path) -> str:
    """sha256 over (name, size, content) of every input file, in name order."""
    h = hashlib.sha256()
    for f in source_files(bpf_dir):
        data = f.read_bytes()
        h.update(f.name.encode() + b"\0" + str(len(data)).encode() + b"\0")
        h.update(data)
    return h.hexdigest()


@dataclass(frozen=True)
class BuildInfo:
    source_hash: str
    compiler: str
    built_at: str
    files: tuple[str, ...]

    @classmethod
    def from_json(cls, data: bytes) -> BuildInfo:
        doc = json.loads(data.decode("utf-8"))
        return cls(str(doc["source_hash"]), str(doc.get("compiler", "")), str(doc.get("built_at", "")),
                   tuple(doc.get("files", ())))


class ElfError(ValueError):
    """The file is not a readable 64-bit little-endian ELF object."""


def read_section(path: Path, name: str) -> bytes | None:
    """Contents of ELF section `name`, None when the object has no such section. No libbpf needed."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ElfError(f"{path}: not a 64-bit little-endian ELF file")
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if e_shoff == 0 or e_shentsize < 64 or e_shoff + e_shnum * e_shentsize > len(data):
        raise ElfError(f"{path}: truncated or has no section headers")

    def header(i: int) -> tuple[int, int, int]:
        sh_name, _type, _flags, _addr, sh_offset, sh_size = struct.unpack_from(
            "<IIQQQQ", data, e_shoff + i * e_shentsize)
        return sh_name, sh_offset, sh_size

    _, str_off, str_size = header(e_shstrndx)
    strtab = data[str_off:str_off + str_size]
    wanted = name.encode()
    for i in range(e_shnum):
        sh_name, off, size = header(i)
        end = strtab.find(b"\0", sh_name)
        if strtab[sh_name:end] == wanted:
            if off + size > len(data):
                raise ElfError(f"{path}: section {name} runs past the end of the file")
            return data[off:off + size]
    return None


def read_buildinfo(path: Path, section: str = SECTION) -> BuildInfo | None:
    """The embedded metadata, or None when the file was built without it."""
    raw = read_section(path, section)
    if raw is None:
        return None
    try:
        return BuildInfo.from_json(raw.rstrip(b"\0"))
    except (ValueError, KeyError, TypeError) as exc:
        raise ElfError(f"{path}: unreadable {section}: {exc}") from exc


def compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return compiler
    return out.splitlines()[0].strip() if out else compiler


def build_time() -> str:
    """$SOURCE_DATE_EPOCH when set (dpkg-buildpackage exports the changelog's date), else now: a
    rebuild of the same sources then embeds the same bytes (reproducible-builds.org's convention)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        try:
            when = dt.datetime.fromtimestamp(int(epoch), dt.UTC)
        except (ValueError, OverflowError, OSError) as exc:
            raise ValueError(f"SOURCE_DATE_EPOCH={epoch!r} is not a Unix time in seconds") from exc
    else:
        when = dt.datetime.now(dt.UTC)
    return when.isoformat(timespec="seconds")


def metadata(bpf_dir: Path, compiler: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "source_hash": source_hash(bpf_dir),
        "compiler": compiler_version(compiler),
        "built_at": build_time(),
        "files": [f.name for f in source_files(bpf_dir)],
    }


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scxctl.bpf.buildinfo", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_json = sub.add_parser("json", help="print the metadata to embed (run from the checkout root)")
    p_json.add_argument("--source-dir", "--bpf-dir", dest="bpf_dir", type=Path, default=Path("bpf"))
    p_json.add_argument("--compiler", default="clang-19")
    p_hash = sub.add_parser("hash", help="print the source hash of a source directory (bpf/, native/)")
    p_hash.add_argument("--source-dir", "--bpf-dir", dest="bpf_dir", type=Path, default=Path("bpf"))
    p_show = sub.add_parser("show", help="print the metadata embedded in an object or the bench worker")
    p_show.add_argument("object", type=Path)
    p_show.add_argument("--section", default=SECTION)
    args = parser.parse_args(argv)
    if args.cmd == "json":
        try:
            doc = metadata(args.bpf_dir, args.compiler)
        except ValueError as exc:
            sys.stderr.write(f"{parser.prog}: error: {exc}\n")
            return 2
        sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n")
    elif args.cmd == "hash":
        sys.stdout.write(source_hash(args.bpf_dir) + "\n")
    else:
        info = read_buildinfo(args.object, args.section)
        if info is None:
            sys.stderr.write(f"{args.object}: no {args.section} section\n")
            return 1
        sys.stdout.write(json.dumps(info.__dict__, default=list, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
