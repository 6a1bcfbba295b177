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
