"""A sealed bundle read across campaigns: verified first, then what its manifest and final.json say.

The ledger (:mod:`h3bench.ledger.chain`) and the regression history
(:mod:`h3bench.ledger.history`) read many bundles that other runs wrote. Each reader
goes through :func:`open_verified`, which runs :func:`h3bench.evidence.verify`
and refuses a bundle that does not verify, naming the files, so nothing
crosses campaigns from a bundle that changed after it was sealed.

What is read here, and where it comes from:

- the hardware kind, ``<devices>x<kind>`` (``8x910b1``, ``4x910c``) or ``sim``,
  from the spec in the manifest: campaigns on different hardware are never compared;
- the engine's identity (``source.engine_commit``, the image digest, the
  commit the host reported for each arm) apart from the harness's own (the
  h3bench version that wrote the bundle, the validator versions that judged
  it in the run; a later re-validation is an addendum and judges nothing here);
- the research fields of a candidate (hypothesis, source attribution,
  ``combination_of``) and of the spec (``diagnostic``, ``final``,
  ``original_baseline``);
- the engine's contract that each server recorded at its start (its
  ``/openapi.json`` and, for vllm arms, ``vllm serve --help=all``), per arm:
  :meth:`StoredBundle.contract`, compared with :func:`contract_changes`;
- the verdict the run wrote (:class:`~h3bench.verdict.verdicts.VerdictDocument`:
  the estimates, outcomes, held-out results and acceptance), read, never
  recomputed. What is absent means the step did not run, and is read as
  None, never guessed.

A bundle is identified by its content, never its path: ``final_sha256`` is
its latest seal (the last segment's ``final.json``, which pins every segment
before it), ``seals`` every seal in order. A resumed bundle still holds the
seals of its earlier states, and :func:`open_verified` with ``seal=`` reads
the bundle as it was when that seal was written (what a ledger entry of that
state was derived from).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3bench.course.schedule import Schedule
from h3bench.errors import EvidenceError
from h3bench.evidence import BundleReader, require_verified
from h3bench.evidence.files import read_json
from h3bench.evidence.layout import FINAL, QUALITY
from h3bench.evidence.manifest import Manifest
from h3bench.evidence.reader import segments_of
from h3bench.run.contract import Contract, contract_changes
from h3bench.run.records import BlockResult, load_results
from h3bench.runspec import BASELINE, RunSpec, parse_runspec
from h3bench.verdict.verdicts import VerdictDocument

__all__ = ["Contract", "StoredBundle", "contract_changes", "is_diagnostic", "open_verified"]


def is_diagnostic(manifest: Manifest) -> bool:
    """Whether a bundle is a DIAGNOSTIC run (its run says so, or its spec is marked diagnostic): never evidence."""
    return manifest.diagnostic or manifest.spec.get("diagnostic") is True


@dataclass(frozen=True)
class StoredBundle:
    """A bundle that verified: its path, manifest, last final.json and that file's SHA-256.

    ``seals`` are the SHA-256 of every segment's final.json in order (the last
    is ``final_sha256``), ``upto`` the segment whose seal this view reads the
    bundle as of (None: the latest), ``manifest_sha256`` what every state and
    copy of one campaign's bundle shares.
    """

    path: Path
    manifest: Manifest
    final: dict[str, Any]
    final_sha256: str
    seals: tuple[str, ...] = ()
    upto: str | None = None
    manifest_sha256: str = ""

    @property
    def latest(self) -> bool:
        """Whether this view is the bundle's latest state (not an earlier seal of a bundle resumed since)."""
        return not self.seals or self.seals[-1] == self.final_sha256

    def _segments(self) -> list[str]:
        segments = segments_of(self.path)
        return segments if self.upto is None else segments[: segments.index(self.upto) + 1]

    @property
    def spec_id(self) -> str:
        return self.manifest.spec_id

    @property
    def spec_data(self) -> dict[str, Any]:
        return dict(self.manifest.spec)

    @property
    def started_at(self) -> str:
        return self.manifest.started_at

    @property
    def hardware_kind(self) -> str:
        """``<number of devices>x<kind>``, or ``sim``: the seeds keep 8x910B1 and 4x910C apart."""
        hardware = self.spec_data.get("hardware") or {}
        kind = str(hardware.get("kind", "unknown"))
        devices = hardware.get("device_ids") or ()
        return f"{len(devices)}x{kind}" if kind != "sim" and devices else kind

    @property
    def diagnostic(self) -> bool:
        return is_diagnostic(self.manifest)

    def engine(self) -> dict[str, Any]:
        """Claims about the serving engine: the pinned source and what each arm's host reported."""
        source = self.manifest.source
        host_engines = (self.manifest.host or {}).get("engine") or {}
        reported = {arm: (found or {}).get("vllm_omni_commit") for arm, found in host_engines.items()}
        return {"engine_commit": source.get("engine_commit"), "image_digest": source.get("image_digest"),
                "kind": source.get("kind", "engine"), "reported_commits": reported}

    def harness(self) -> dict[str, Any]:
        """Claims about h3bench itself: its version, and the validators that judged the run (not later re-validations)."""
        in_run: set[str] = set()
        for segment in self._segments():
            if (self.path / segment / FINAL).is_file():
                listed = read_json(self.path / segment / FINAL).get("files", {})
                in_run.update(Path(rel).stem for rel in listed if Path(rel).parent.name == QUALITY)
        return {"h3bench_version": self.manifest.h3bench_version, "validator_versions": sorted(in_run)}

    def arm(self, name: str) -> dict[str, Any]:
        return dict((self.spec_data.get("arms") or {}).get(name) or {})

    def attribution(self, candidate: str) -> dict[str, Any]:
        """The candidate's hypothesis, source attribution and the arms it combines (None where not declared)."""
        arm = self.arm(candidate)
        return {"hypothesis": arm.get("hypothesis"), "source": arm.get("source"),
                "combination_of": list(arm.get("combination_of") or [])}

    def baseline_command(self) -> str:
        """The baseline arm's launch, as canonical JSON: the argv and environment the manifest recorded, else the arm.

        A vLLM arm's options are its command; its description is not.
        """
        recorded = self.manifest.arms.get(BASELINE)
        arm = self.arm(BASELINE)
        launch = ({"argv": list(recorded.argv), "env": recorded.env} if recorded is not None
                  else {key: value for key, value in arm.items() if key != "description" and value})
        return json.dumps(launch, sort_keys=True, separators=(",", ":"))

    def runspec(self) -> RunSpec:
        """The bundle's own spec, as its manifest recorded it."""
        return parse_runspec(self.spec_data, source=f"{self.path}/manifest.json")

    def contract(self) -> Contract:
        """What the bundle's servers said they accept, per arm (:mod:`h3bench.run.contract`).

        Empty for a bundle written before contracts were recorded. Compare two
        with :func:`contract_changes`: history, the ledger, a pool and
        ``--baseline-evidence`` name a change of contract with it.
        """
        return Contract.of(BundleReader.open(self.path).lifecycle())

    def document(self) -> VerdictDocument | None:
        """The run's verdict.json (its last segment's, as of this view's seal), or None when the run wrote none."""
        found = BundleReader.open(self.path).read_verdict(self.upto)
        return None if found is None else VerdictDocument.from_dict(found, where=f"{self.path}/verdict.json")

    def block_results(self) -> list[BlockResult]:
        """Every block of the spec that the bundle holds a finished attempt of, in schedule order."""
        schedule = Schedule(self.runspec())
        return list(load_results(BundleReader.open(self.path), schedule.blocks).values())


def open_verified(path: str | Path, *, seal: str | None = None) -> StoredBundle:
    """Verify the bundle at ``path`` and read it; EvidenceError naming every problem when it does not verify.

    Only a sealed bundle counts: a run that is still going, or was killed and
    never resumed, has no final result to keep. ``seal``: read the bundle as
    of that earlier seal (the SHA-256 of one of its final.json files).
    """
    root = Path(path)
    if not (root / "manifest.json").is_file():
        raise EvidenceError(f"{root}: not an evidence bundle (no manifest.json)", path=str(root))
    require_verified(root, "it is not read")
    bundle = BundleReader.open(root)
    seals = bundle.seals()
    chosen = [(segment, sha) for segment, sha in seals if seal is None or sha == seal][-1:]
    if not chosen:
        raise EvidenceError(f"{root}: none of its final.json files has SHA-256 {seal} (its seals: "
                            f"{', '.join(sha[:12] for _, sha in seals)}): not the bundle that was recorded",
                            path=str(root))
    segment, sha = chosen[0]
    final_path = root / segment / FINAL
    try:
        final = json.loads(final_path.read_bytes())
    except ValueError as exc:
        raise EvidenceError(f"{final_path}: not valid JSON ({exc})", path=str(final_path)) from exc
    manifest_sha = hashlib.sha256((root / "manifest.json").read_bytes()).hexdigest()
    return StoredBundle(root.resolve(), bundle.manifest, final, sha, tuple(s for _, s in seals),
                        None if segment == seals[-1][0] else segment, manifest_sha)
