"""One ledger entry per candidate and duration of a sealed bundle: what was tried, why, and how it ended.

An entry (:class:`LedgerEntry`) holds the spec id and the SHA-256 of the
bundle's ``final.json`` (which lists the hash of every other file, so it pins
the whole bundle), the hardware kind, the candidate with its hypothesis and
source attribution, the effect with its bounds, the quality, lossless and
held-out outcomes, the verdict, which stages moved (attribution, never the
verdict) and the engine's contract. Every figure and outcome is read from the
verdict the run wrote (``verdict.json``, :class:`~h3bench.verdict.verdicts.VerdictDocument`),
never recomputed, so the ledger says what the campaign said:

- **FAIL** (rejected) when any part failed (speed slower, a quality gate,
  the lossless test, held-out), or when the acceptance says the candidate was
  not accepted although every part here passed (its reasons are kept);
- **INCONCLUSIVE** when no part failed but one could not be decided;
- **PASS** (accepted) when every part passed.

A shard of a campaign over several hosts (``--shard I/N``) is never a claim:
its entry is marked with the shard (``shard 1/2``, :class:`~h3bench.ledger.campaigns.ShardMark`),
its verdict is INCONCLUSIVE, "not judged alone", and its own per-host
figures are kept. A pooled bundle's entry names the shards it pooled, by
seal: the ledger knows the shards and their pools as one campaign
(:mod:`~h3bench.ledger.campaigns`).

Engine claims (the source commit, the image) and harness claims (the
h3bench version, the validator versions that judged the run) are kept in
separate sections, so a change of validator is never read as a change of
the engine. A part that did not run is None, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from h3bench.errors import UsageError
from h3bench.evidence.codec import from_json, to_json
from h3bench.ledger.campaigns import CampaignKey, ShardMark, pooled_shards, shard_mark
from h3bench.outcome import Outcome, combine
from h3bench.run.contract import Contract
from h3bench.session.stored import StoredBundle
from h3bench.verdict.acceptance import shard_alone
from h3bench.verdict.stage_effects import StageEffects
from h3bench.verdict.verdicts import (
    Acceptance,
    CandidateVerdict,
    DurationVerdict,
    HeldoutVerdict,
    LookRecord,
    LosslessSummary,
    RecipeStep,
    VerdictDocument,
    duration_key,
)

__all__ = ["FORMAT", "WORDS", "BundleRef", "Effect", "LedgerEntry", "entries_of", "refuse_diagnostic"]

FORMAT = "h3bench-ledger/2"
#: How the ledger names a candidate's outcome.
WORDS = {Outcome.PASS: "accepted", Outcome.FAIL: "rejected", Outcome.INCONCLUSIVE: "inconclusive"}


@dataclass(frozen=True)
class BundleRef:
    """Which bundle an entry comes from: where it was, and the hashes that pin it (its identity, not its path).

    ``final_sha256`` is the seal of the state the entry describes; ``seals``
    every seal of the bundle up to it, in order (a resumed bundle's earlier
    states: an entry of one of them is superseded, never duplicated).
    ``shard``: the bundle is one shard of a campaign over several hosts;
    ``pooled``: it is the pool of these shards (:mod:`~h3bench.ledger.campaigns`).
    """

    path: str
    name: str
    started_at: str
    final_sha256: str
    outcome: str  # final.json's: completed, interrupted, aborted
    seals: tuple[str, ...] = ()
    manifest_sha256: str | None = None
    shard: ShardMark | None = None
    pooled: tuple[ShardMark, ...] = ()


@dataclass(frozen=True)
class Effect:
    """The paired ratio with its one-sided bounds, as verdict.json holds it; ``why`` when there is none."""

    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    k: int
    design: str | None = None
    level_low: float | None = None  # the one-sided level of ci_low
    level_high: float | None = None  # of ci_high
    why: str | None = None

    def text(self) -> str:
        if self.ratio is None:
            return "-"
        if self.ci_low is None or self.ci_high is None:
            return f"{self.ratio:.3f} (no interval)"
        return f"{self.ratio:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}]"


@dataclass(frozen=True)
class LedgerEntry:
    """One candidate at one duration of one sealed bundle (the chain fields are the ledger's, :mod:`~h3bench.ledger.chain`)."""

    format: str
    bundle: BundleRef
    spec_id: str
    spec_name: str
    hardware: str
    candidate: str
    duration: str  # "5", "15"
    hypothesis: str | None
    source: dict[str, Any] | None
    combination_of: tuple[str, ...]
    effect: Effect
    speed: Outcome | None
    quality: Outcome | None  # None: not run
    lossless: LosslessSummary | None
    heldout: HeldoutVerdict | None
    verdict: Outcome
    reasons: tuple[str, ...]
    final_combination: bool
    campaign: Acceptance | None
    engine: dict[str, Any]
    harness: dict[str, Any]
    looks: LookRecord | None = None  # where the series stopped, and the device time it took
    # Which stage moved (verdict.json's per-part paired effects): attribution at its own level, never the verdict.
    stages: StageEffects | None = None
    recipe_steps: tuple[RecipeStep, ...] = ()
    contract: Contract | None = None  # what the bundle's servers said they accept (h3bench.run.contract)

    @property
    def word(self) -> str:
        """How the ledger names the outcome: a shard's entry is named as the shard, never as a verdict."""
        return self.bundle.shard.label if self.bundle.shard is not None else WORDS[self.verdict]

    @property
    def campaign_key(self) -> CampaignKey | None:
        """The sharded campaign this entry's bundle belongs to (None: a bundle run without ``--shard``)."""
        return CampaignKey.of(self.spec_id, self.bundle.shard, self.bundle.pooled, self.bundle.seals)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = to_json(self)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str) -> LedgerEntry:
        return from_json(cls, data, where=where)


def refuse_diagnostic(bundle: StoredBundle) -> None:
    """A DIAGNOSTIC bundle is exploration, not evidence: it never enters the ledger."""
    if bundle.diagnostic:
        raise UsageError(
            f"{bundle.path}: a DIAGNOSTIC run (not a campaign result) cannot be entered in the ledger as evidence; "
            "run the campaign formally (pinned, not diagnostic) and add that bundle"
        )


def _effect(d: DurationVerdict | None) -> Effect:
    estimate = d.estimate if d is not None else None
    if estimate is None:
        return Effect(None, None, None, 0, why="no successful block of both arms in this bundle")
    return Effect(estimate.geomean, estimate.ci_low, estimate.ci_high, estimate.k, estimate.design,
                  estimate.levels.fail_level, estimate.levels.pass_level,
                  None if estimate.ci_low is not None else "; ".join(estimate.notes))


def _verdict(verdict: CandidateVerdict | None, key: str, heldout: HeldoutVerdict | None, accepted: bool | None,
             not_accepted: tuple[str, ...]) -> tuple[Outcome, list[str]]:
    d = verdict.durations.get(key) if verdict is not None else None
    if verdict is None or d is None:
        return Outcome.INCONCLUSIVE, ["no verdict for this duration in the bundle (verdict.json absent or incomplete)"]
    reasons: list[str] = []
    parts = [("speed", d.speed, d.speed_reasons[:1]), ("quality", d.quality or Outcome.INCONCLUSIVE, ())]
    if d.lossless_enabled:
        parts.append(("lossless", d.lossless.outcome if d.lossless else Outcome.INCONCLUSIVE,
                      d.lossless.reasons[:1] if d.lossless else ()))
    if heldout is not None:
        parts.append(("held-out", heldout.outcome, heldout.reasons))
    for name, outcome, why in parts:
        if outcome is not Outcome.PASS:
            reasons.append(f"{name}: {outcome}")
            reasons.extend(why)
    if verdict.stopped:
        reasons.append(f"stopped: {verdict.stopped.reason}")
    # The stored verdict at this duration (its stop rule included), then the held-out phase that verdict.json keeps.
    decided = combine([verdict.outcome_at(key), *([heldout.outcome] if heldout is not None else [])])
    if accepted is False:
        reasons.extend(f"not accepted: {r}" for r in not_accepted or ("(no reason given)",))
        decided = Outcome.FAIL if decided is Outcome.PASS else decided
    return decided, reasons


def entries_of(bundle: StoredBundle) -> list[LedgerEntry]:
    """The ledger entries of a verified, non-diagnostic bundle: one per candidate and duration, chain fields aside."""
    refuse_diagnostic(bundle)
    spec = bundle.runspec()
    document = bundle.document() or VerdictDocument(spec.spec_id, spec.name, "", "FORMAL", None, {})
    campaign = document.accepted
    outcome = str(bundle.final.get("outcome"))
    seals = bundle.seals[: bundle.seals.index(bundle.final_sha256) + 1] if bundle.final_sha256 in bundle.seals else ()
    where = f"{bundle.path}/manifest.json"
    shard = shard_mark(bundle.manifest, bundle.final_sha256, where=where)
    ref = BundleRef(str(bundle.path), bundle.path.name, bundle.started_at, bundle.final_sha256, outcome, seals,
                    bundle.manifest_sha256 or None, shard, pooled_shards(bundle.manifest, where=where))
    entries = []
    found = bundle.contract()
    contract = found if found.recorded else None
    for candidate in spec.candidates:
        verdict = document.candidates.get(candidate)
        acceptance = campaign.candidates.get(candidate) if campaign is not None else None
        for duration in spec.workload.durations:
            key = duration_key(duration)
            d = verdict.durations.get(key) if verdict is not None else None
            heldout = document.heldout.get(candidate, {}).get(key)
            decided, reasons = _verdict(verdict, key, heldout, acceptance.accepted if acceptance else None,
                                        acceptance.reasons if acceptance else ())
            if shard is not None:  # one host's pairs: never a claim; its own figures stay in the entry
                decided = Outcome.INCONCLUSIVE
                reasons = [shard_alone(shard.index, shard.count),
                           *(r for r in reasons if not r.startswith("not accepted: "))]
            if outcome != "completed":
                reasons.append(f"the run ended {outcome}: {bundle.final.get('interrupted') or bundle.final.get('error')}")
            attribution = bundle.attribution(candidate)
            entries.append(LedgerEntry(
                format=FORMAT, bundle=ref, spec_id=bundle.spec_id, spec_name=spec.name,
                hardware=bundle.hardware_kind, candidate=candidate, duration=f"{duration:g}",
                hypothesis=attribution["hypothesis"], source=attribution["source"],
                combination_of=tuple(attribution["combination_of"]), effect=_effect(d),
                speed=d.speed if d is not None else None, quality=d.quality if d is not None else None,
                lossless=d.lossless if d is not None else None, heldout=heldout, verdict=decided,
                reasons=tuple(reasons), final_combination=campaign is not None and campaign.final == candidate,
                campaign=campaign, engine=bundle.engine(), harness=bundle.harness(),
                looks=d.looks if d is not None else None, stages=d.stages if d is not None else None,
                recipe_steps=d.recipe_steps if d is not None else (), contract=contract))
    return entries
