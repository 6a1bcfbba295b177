"""Which pyland BPF object the loader uses, and whether it was built from the sources at hand.

Search order (README "## pyland"): $SCXCTL_BPF_OBJECT, then the checkout's bpf/build/pyland.bpf.o,
then /usr/lib/scxctl/pyland.bpf.o -- the first that exists wins. When the bpf/ sources are present
(a checkout), the object's embedded source hash must equal the hash of those sources: otherwise the
object is stale (or of unknown origin) and `scxctl run` refuses it unless told --allow-stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scxctl import paths
from scxctl.bpf.buildinfo import BuildInfo, ElfError, read_buildinfo, source_hash
from scxctl.errors import ExitCode, ScxctlError


@dataclass(frozen=True)
class Candidate:
    origin: str  # "$SCXCTL_BPF_OBJECT", "checkout", "installed"
    path: Path
    exists: bool
    info: BuildInfo | None  # embedded metadata, None when absent or unreadable
    error: str | None = None  # why the metadata could not be read


@dataclass(frozen=True)
class ObjectVerdict:
    chosen: Candidate | None
    candidates: tuple[Candidate, ...]
    sources_hash: str | None  # hash of the checkout's bpf/ sources, None without a checkout

    @property
    def fresh(self) -> bool | None:
        """True/False when it can be told (sources present), None when there is nothing to compare."""
        if self.chosen is None or self.sources_hash is None:
            return None
        return self.chosen.info is not None and self.chosen.info.source_hash == self.sources_hash

    @property
    def conflicting(self) -> list[Candidate]:
        """Existing candidates whose hash differs from the chosen one's (the several-objects trap)."""
        if self.chosen is None:
            return []
        mine = self.chosen.info.source_hash if self.chosen.info else None
        return [
            c for c in self.candidates
            if c.exists and c.path != self.chosen.path and (c.info.source_hash if c.info else None) != mine
        ]


def _candidate(origin: str, path: Path) -> Candidate:
    if not path.is_file():
        return Candidate(origin, path, False, None)
    try:
        return Candidate(origin, path, True, read_buildinfo(path))
    except (OSError, ElfError) as exc:
        return Candidate(origin, path, True, None, str(exc))


def bpf_sources_dir() -> Path | None:
    root = paths.source_root()
    return root / "bpf" if root is not None else None


def inspect(candidates: list[tuple[str, Path]] | None = None, bpf_dir: Path | None = None) -> ObjectVerdict:
    """Look at every candidate (never raises); the first existing one is the one the loader uses."""
    cands = tuple(_candidate(o, p) for o, p in (candidates or paths.pyland_object_candidates()))
    chosen = next((c for c in cands if c.exists), None)
    bpf_dir = bpf_dir if bpf_dir is not None else bpf_sources_dir()
    src_hash = None
    if bpf_dir is not None and (bpf_dir / "pyland.bpf.c").is_file():
        src_hash = source_hash(bpf_dir)
    return ObjectVerdict(chosen, cands, src_hash)


def resolve(allow_stale: bool = False, verdict: ObjectVerdict | None = None) -> Path:
    """The object to load, or ScxctlError(BPF) when it is missing or stale."""
    v = verdict or inspect()
    if v.chosen is None:
        looked = ", ".join(str(c.path) for c in v.candidates)
        raise ScxctlError(f"pyland BPF object not found (looked at {looked})", ExitCode.BPF,
                          hint="build it with: make -C bpf")
    if v.fresh is False and not allow_stale:
        c = v.chosen
        what = ("has no build metadata" if c.info is None
                else f"was built from other sources (hash {c.info.source_hash[:12]}, "
                     f"sources {v.sources_hash[:12] if v.sources_hash else '?'})")
        raise ScxctlError(f"stale BPF object: {c.path} ({c.origin}) {what}", ExitCode.BPF,
                          hint="rebuild with: make -C bpf (or pass --allow-stale to run it anyway)")
    return v.chosen.path
