"""Which pyland BPF object the loader uses, and whether it was built from the sources at hand.

Search order (docs/pyland.md): $SCXCTL_BPF_OBJECT, then the checkout's bpf/build/pyland.bpf.o,
then /usr/lib/scxctl/pyland.bpf.o -- the first that exists wins. When the bpf/ sources are present
(a checkout), the object's embedded source hash must equal the hash of those sources: otherwise the
object is stale (or of unknown origin) and `scxctl run` refuses it unless told --allow-stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scxctl import paths
from scxctl.bpf.buildinfo import SECTION, BuildInfo, ElfError, read_buildinfo, source_hash
from scxctl.errors import ExitCode, ScxctlError


@dataclass(frozen=True)
class Artifact:
    """A built file whose embedded source hash is checked: the BPF object, the bench worker."""

    what: str  # how messages name it
    section: str  # the ELF section holding its build metadata
    sources: str  # the checkout's source directory (relative to the root)
    main_source: str  # the file whose presence says the sources are there
    build_hint: str


PYLAND = Artifact("pyland BPF object", SECTION, "bpf", "pyland.bpf.c", "make -C bpf")


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
    sources_hash: str | None  # hash of the checkout's sources, None without a checkout
    artifact: Artifact = PYLAND

    @property
    def fresh(self) -> bool | None:
        """True/False when it can be told (sources present), None when there is nothing to compare."""
        if self.chosen is None or self.sources_hash is None:
            return None
        return self.chosen.info is not None and self.chosen.info.source_hash == self.sources_hash

    def details(self) -> dict[str, Any]:
        """The verdict as doctor's JSON details (the same keys for every checked artifact)."""
        return {
            "candidates": [
                {"origin": c.origin, "path": str(c.path), "exists": c.exists,
                 "source_hash": c.info.source_hash if c.info else None,
                 "built_at": c.info.built_at if c.info else None, "error": c.error}
                for c in self.candidates
            ],
            "sources_hash": self.sources_hash,
            "chosen": str(self.chosen.path) if self.chosen else None,
            "fresh": self.fresh,
        }

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


def _candidate(origin: str, path: Path, section: str) -> Candidate:
    if not path.is_file():
        return Candidate(origin, path, False, None)
    try:
        return Candidate(origin, path, True, read_buildinfo(path, section))
    except (OSError, ElfError) as exc:
        return Candidate(origin, path, True, None, str(exc))


def sources_dir(artifact: Artifact = PYLAND) -> Path | None:
    root = paths.source_root()
    return root / artifact.sources if root is not None else None


def inspect(candidates: list[tuple[str, Path]] | None = None, bpf_dir: Path | None = None,
            artifact: Artifact = PYLAND) -> ObjectVerdict:
    """Look at every candidate (never raises); the first existing one is the one the loader uses."""
    if candidates is None:
        candidates = paths.pyland_object_candidates()
    cands = tuple(_candidate(o, p, artifact.section) for o, p in candidates)
    chosen = next((c for c in cands if c.exists), None)
    bpf_dir = bpf_dir if bpf_dir is not None else sources_dir(artifact)
    src_hash = None
    if bpf_dir is not None and (bpf_dir / artifact.main_source).is_file():
        src_hash = source_hash(bpf_dir)
    return ObjectVerdict(chosen, cands, src_hash, artifact)


def resolve(allow_stale: bool = False, verdict: ObjectVerdict | None = None,
            code: ExitCode = ExitCode.BPF) -> Path:
    """The file to use, or ScxctlError(`code`) when it is missing or stale."""
    v = verdict or inspect()
    a = v.artifact
    if v.chosen is None:
        looked = ", ".join(str(c.path) for c in v.candidates)
        raise ScxctlError(f"{a.what} not found (looked at {looked})", code,
                          hint=f"build it with: {a.build_hint}")
    if v.fresh is False and not allow_stale:
        c = v.chosen
        what = ("has no build metadata" if c.info is None
                else f"was built from other sources (hash {c.info.source_hash[:12]}, "
                     f"sources {v.sources_hash[:12] if v.sources_hash else '?'})")
        raise ScxctlError(f"stale {a.what}: {c.path} ({c.origin}) {what}", code,
                          hint=f"rebuild with: {a.build_hint} (or pass --allow-stale to run it anyway)")
    return v.chosen.path
