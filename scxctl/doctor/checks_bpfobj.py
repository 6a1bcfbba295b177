"""The pyland BPF object: which one the loader will use, and was it built from these sources?

Seed 000 lost days to a stale object loaded from another path than the build wrote; this check
names the object `scxctl run` would load, compares its embedded source hash with the checkout's
bpf/ sources, and warns when several candidate objects with different hashes exist.
"""

from __future__ import annotations

from scxctl.bpf import object as bpfobject
from scxctl.doctor.model import CheckResult, DoctorContext, Status, check, result

CID = "bpf.object"
_BUILD_HINT = "build it with: make -C bpf"


def _short(h: str | None) -> str:
    return h[:12] if h else "none"


@check(CID, "pyland BPF object")
def bpf_object(ctx: DoctorContext) -> CheckResult:
    v = bpfobject.inspect()
    details = {
        "candidates": [
            {"origin": c.origin, "path": str(c.path), "exists": c.exists,
             "source_hash": c.info.source_hash if c.info else None,
             "built_at": c.info.built_at if c.info else None, "error": c.error}
            for c in v.candidates
        ],
        "sources_hash": v.sources_hash,
        "chosen": str(v.chosen.path) if v.chosen else None,
        "fresh": v.fresh,
    }
    if v.chosen is None:
        looked = ", ".join(str(c.path) for c in v.candidates)
        return result(CID, Status.FAIL, f"no pyland BPF object (looked at {looked})", _BUILD_HINT, **details)
    c = v.chosen
    where = f"{c.path} ({c.origin})"
    if c.error:
        return result(CID, Status.FAIL, f"{where}: {c.error}", _BUILD_HINT, **details)
    if v.fresh is False:
        why = "has no build metadata" if c.info is None else (
            f"is stale: built from sources {_short(c.info.source_hash)}, "
            f"bpf/ is now {_short(v.sources_hash)}")
        return result(CID, Status.FAIL, f"{where} {why}", "rebuild with: make -C bpf", **details)
    others = v.conflicting
    built = f", built {c.info.built_at}" if c.info else ""
    state = "matches the bpf/ sources" if v.fresh else "no bpf/ sources here to compare with"
    if others:
        listed = "; ".join(f"{o.path} ({o.origin}, hash {_short(o.info.source_hash if o.info else None)})"
                           for o in others)
        return result(CID, Status.WARN, f"using {where}, which {state}; other objects differ: {listed}",
                      "remove or rebuild the other objects so only one pyland.bpf.o can be picked up",
                      **details)
    return result(CID, Status.OK, f"using {where}, which {state}{built}", None, **details)
