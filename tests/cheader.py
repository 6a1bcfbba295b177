"""Reads member names and macros out of bpf/pyland.h, so that tests compare the Python side with the
C header itself instead of with a copy of a tuple that could drift along with the code it checks.

A deliberately small parser: the header's structs are flat (no nested braces, one declarator per
line), which is all it needs to understand; anything else makes it fail loudly, not guess.
"""

from __future__ import annotations

import re
from pathlib import Path

PYLAND_H = Path(__file__).resolve().parent.parent / "bpf" / "pyland.h"

_COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DECLARATOR = re.compile(r"(\w+)\s*(?:\[[^\]]*\])?\s*$")


def _source(header: Path) -> str:
    return _COMMENTS.sub(" ", header.read_text())


def struct_members(name: str, header: Path = PYLAND_H) -> list[str]:
    """The member names of `struct NAME { ... };` in declaration order."""
    found = re.search(rf"\bstruct\s+{re.escape(name)}\s*\{{([^{{}}]*)\}}\s*;", _source(header))
    if found is None:
        raise AssertionError(f"struct {name} not found (or not flat) in {header}")
    members = []
    for decl in found.group(1).split(";"):
        if not decl.strip():
            continue
        m = _DECLARATOR.search(decl)
        if m is None or "," in decl:
            raise AssertionError(f"cannot read the member declaration {decl.strip()!r} of struct {name}")
        members.append(m.group(1))
    return members


def defines(prefix: str, header: Path = PYLAND_H) -> dict[str, str]:
    """`#define PREFIXsuffix value` lines: suffix -> value text (comments removed)."""
    return {
        m.group(1): m.group(2).strip()
        for m in re.finditer(rf"^#define\s+{re.escape(prefix)}(\w+)[ \t]+([^\n]*)$", _source(header), re.M)
    }


def enum_values(name: str, header: Path = PYLAND_H) -> dict[str, int]:
    """`enum NAME { A = expr, ... };`: member -> value, for members given as integer expressions of
    literals and shifts (all the header's enums are); others make it fail loudly."""
    found = re.search(rf"\benum\s+{re.escape(name)}\s*\{{([^{{}}]*)\}}\s*;", _source(header))
    if found is None:
        raise AssertionError(f"enum {name} not found in {header}")
    out = {}
    for item in found.group(1).split(","):
        if not item.strip():
            continue
        member, eq, expr = item.partition("=")
        if not eq or not re.fullmatch(r"[\s\dxXa-fA-F<>|()]+", expr):
            raise AssertionError(f"cannot read the enum member {item.strip()!r} of enum {name}")
        out[member.strip()] = int(eval(expr))  # literals and shifts only, checked above
    return out


def c_int(text: str) -> int:
    """The value of a C integer literal such as `0x70796c01LL`, `(-1)` or `1ULL`."""
    return int(re.sub(r"(?<=[0-9a-fA-F])[uUlL]+$", "", text.strip().strip("()")), 0)
