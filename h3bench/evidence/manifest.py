"""A bundle's ``manifest.json`` as one typed record: written and read through :mod:`h3bench.evidence.codec`.

:meth:`~h3bench.evidence.bundle.Bundle.create` takes a :class:`Manifest` and
every reader gets one back (:attr:`~h3bench.evidence.reader.BundleReader.manifest`),
so a field is named once and a missing or malformed one is the same
:class:`~h3bench.errors.EvidenceError`, naming the file and the field,
wherever the manifest is read. The keys on disk are the field names, as
bundles have always held them: a bundle written before this record reads
back, and a key this record does not know is ignored.

The spec is kept as the JSON it was written as (``h3bench.runspec`` parses
it, above this package); so are the host's and the shard's records, which
other stages own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h3bench
from h3bench.errors import EvidenceError
from h3bench.evidence import files
from h3bench.evidence.codec import from_json, to_json
from h3bench.evidence.layout import FORMAT, MANIFEST

__all__ = ["ArmLaunch", "Manifest", "RunKind"]

FORMAL, DIAGNOSTIC = "FORMAL", "DIAGNOSTIC"


@dataclass(frozen=True)
class RunKind:
    """What the run is before its first block (:mod:`h3bench.course.preflight`): FORMAL, or DIAGNOSTIC and why."""

    kind: str  # FORMAL or DIAGNOSTIC
    reasons: tuple[str, ...] = ()  # why DIAGNOSTIC; older bundles name only unpinned fields
    unpinned: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()  # pins the host could not confirm
    underpowered: tuple[str, ...] = ()  # why the design cannot reach its verdict

    @property
    def diagnostic(self) -> bool:
        return self.kind == DIAGNOSTIC

    def diagnostic_reasons(self) -> tuple[str, ...]:
        """Why the run is DIAGNOSTIC (empty for a FORMAL run)."""
        if not self.diagnostic:
            return ()
        return self.reasons or (f"--allow-unpinned: {', '.join(self.unpinned)}",)


@dataclass(frozen=True)
class ArmLaunch:
    """An arm's launch as built from the spec: its argv (placeholders unsubstituted) and environment."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    rules_checked_against: str | None = None  # a vllm arm's: the upstream rules its options were checked against


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """``manifest.json``: the spec and every identity a run records before its first block."""

    spec_id: str  # the SHA-256 of the spec's canonical JSON
    spec: dict[str, Any]  # the RunSpec as plain JSON (scrubbed)
    started_at: str
    h3bench_version: str
    format: str = FORMAT
    environment: dict[str, Any] | None = None  # the host and interpreter (h3bench.host.environment)
    inputs: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    session: str | None = None  # the run's own id
    arms: dict[str, ArmLaunch] = field(default_factory=dict)
    run: RunKind | None = None  # None: written without a preflight (a test's bundle)
    host: dict[str, Any] | None = None  # the host's evidence (h3bench.host.inventory)
    shard: dict[str, Any] | None = None  # a shard of a campaign over several hosts (h3bench.session.runner)
    pool: dict[str, Any] | None = None  # a pooled bundle: the shards it pooled (h3bench.pool.fanin)
    lpips_weights: dict[str, Any] | None = None

    @classmethod
    def new(cls, *, spec_id: str, spec: dict[str, Any], started_at: str | None = None, **fields: Any) -> Manifest:
        """A new run's manifest: written by this h3bench, started now unless ``started_at`` says when."""
        return cls(spec_id=spec_id, spec=spec, started_at=started_at or files.now(),
                   h3bench_version=h3bench.__version__, **fields)

    @property
    def diagnostic(self) -> bool:
        """Whether the run is stamped DIAGNOSTIC: never a campaign result, nor evidence for one."""
        return self.run is not None and self.run.diagnostic

    def diagnostic_reasons(self) -> tuple[str, ...]:
        return () if self.run is None else self.run.diagnostic_reasons()

    def to_record(self, where: Path) -> dict[str, Any]:
        """The manifest as JSON types; EvidenceError when a value would not read back as itself (a NaN, a non-str key)."""
        files.check_json(dataclasses.asdict(self), str(where))
        record: dict[str, Any] = to_json(self)
        return record

    @classmethod
    def from_record(cls, data: Any, where: Path) -> Manifest:
        """The manifest read from its JSON; EvidenceError naming ``where`` and the field that is missing or malformed."""
        try:
            return from_json(cls, data, where="")
        except EvidenceError as exc:
            raise EvidenceError(f"{where}: {exc}", path=str(where)) from None

    @classmethod
    def read(cls, bundle: Path) -> Manifest:
        """The manifest of the bundle at ``bundle``; EvidenceError when there is none, or it does not read."""
        if not (bundle / MANIFEST).is_file():
            raise EvidenceError(f"{bundle}: not an evidence bundle (no {MANIFEST})", path=str(bundle))
        return cls.from_record(files.read_json(bundle / MANIFEST), bundle / MANIFEST)
