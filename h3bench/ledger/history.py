"""Regression history across campaigns: the baseline's E2E median per bundle, over time, with its steps.

:func:`read_history` reads every bundle under the given directories. Each
is verified first (:func:`h3bench.session.stored.open_verified`); one that does not
verify, or is DIAGNOSTIC (not a campaign result), is skipped and named with
the reason. A campaign counts once, whatever its paths: bundles are known by
their content (the manifest every state and copy of a campaign's bundle
shares, and its seals), so one directory named twice (relatively and
absolutely), a copy, or an earlier copy of a bundle resumed since is the same
campaign, counted in its latest state and named among the skipped. Copies
resumed apart (their seals diverge) are not counted. A campaign over
several hosts is one campaign too (:mod:`~h3bench.ledger.campaigns`): its
pooled bundle is its point, and the point names the bundles it folds (the
shards it pooled, an earlier pool of fewer of them, a re-pool of the same
shards); a shard whose pool is not among the bundles is not counted (one
host's pairs are not the campaign), and is named with why; nor are pools
of complementary shards (one holds shard 1/2, another shard 2/2 of the same
spec), which may be one campaign's shares or two campaigns'. The rest are grouped
into series by

- the hardware kind (``8x910b1`` and ``4x910c`` are never mixed),
- the workload at one duration (size, fps, steps, seed, shifts),
- the baseline arm's launch (argv or vLLM command table, and environment),
- the spec apart from the engine under test (:func:`comparable_id`): bundles
  of different spec ids are compared only when their specs differ in nothing
  but ``source`` (the engine commit and image digest whose changes history
  follows), ``hints`` (planning estimates) and descriptions; a spec that
  differs in anything that shapes a measurement (protocol, gates, inputs,
  model, arms) starts a series of its own,

so that a series compares only campaigns that ran the same thing on the same
kind of host. Within a series, campaigns are ordered by the bundle's start
time, then the engine commit. A campaign's value is the median of its
baseline blocks' medians (each block is one fresh server; the campaign
median is over those; the run computed it once and wrote it to verdict.json), and
:func:`h3bench.ledger.changepoint.detect_steps` proposes
and flags the steps. A change of the baseline's contract between two
campaigns of a series (its ``/openapi.json`` or ``vllm serve --help=all``,
:mod:`h3bench.run.contract`) is named: the engine changed under the same
command.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3bench.errors import H3BenchError
from h3bench.evidence.codec import to_json
from h3bench.ledger.campaigns import CampaignKey, pooled_shards, shard_mark
from h3bench.ledger.changepoint import StepReport, detect_steps
from h3bench.runspec import BASELINE
from h3bench.session.stored import Contract, StoredBundle, contract_changes, open_verified

__all__ = ["CampaignPoint", "History", "Series", "comparable_id", "contract_lines", "history_json",
           "history_lines", "read_history"]

# What a history may differ in between campaigns of one series: the engine it follows, and words.
_NOT_COMPARED = ("source", "hints", "description")


@dataclass(frozen=True)
class CampaignPoint:
    """One bundle's point in a series."""

    bundle: str  # the bundle's directory
    started_at: str
    engine_commit: str | None
    median_s: float  # median of the baseline blocks' medians
    blocks: int
    contract: Contract | None = None  # what the bundle's baseline servers said they accept; None: not recorded
    folded: tuple[str, ...] = ()  # a pooled campaign: the other bundles of it that this point counts, with what each is


@dataclass(frozen=True)
class Series:
    """The baseline's medians of one hardware kind, workload and baseline command, in campaign order."""

    hardware: str
    duration: str
    workload: str  # canonical JSON of the workload at this duration
    command: str  # canonical JSON of the baseline's launch
    campaigns: tuple[CampaignPoint, ...]
    steps: StepReport
    spec: str = ""  # comparable_id of the campaigns' specs

    @property
    def ongoing_regression(self) -> bool:
        return any(step.regression and step.ongoing for step in self.steps.steps)

    @property
    def title(self) -> str:
        workload = json.loads(self.workload)
        launch = json.loads(self.command)
        # The recorded argv; a bundle without a launch record names the arm's options instead.
        argv = " ".join(launch.get("argv", [])) or json.dumps({k: v for k, v in launch.items() if k != "env"},
                                                              sort_keys=True)
        short = argv if len(argv) <= 70 else argv[:67] + "..."
        return (f"{self.hardware} · {self.duration} s · {workload.get('size')} {workload.get('fps')} fps "
                f"{workload.get('steps')} steps · baseline: {short} · spec {self.spec[:12]} (but its engine)")


@dataclass(frozen=True)
class History:
    series: tuple[Series, ...]
    skipped: tuple[tuple[str, str], ...]  # (bundle path, why)


def _bundle_dirs(dirs: Sequence[Path]) -> list[Path]:
    """Every bundle directory under ``dirs``, each once however it was named (relative, absolute, via a link)."""
    found = {manifest.parent.resolve() for root in dirs for manifest in root.rglob("manifest.json")}
    return sorted(found)


def comparable_id(stored: StoredBundle) -> str:
    """SHA-256 of the bundle's spec without what a history may change between campaigns (engine, hints, words)."""
    data = json.loads(stored.runspec().canonical_json())
    for key in _NOT_COMPARED:
        data.pop(key, None)
    for arm in (data.get("arms") or {}).values():
        if isinstance(arm, dict):
            arm.pop("description", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _one_per_campaign(bundles: list[StoredBundle]) -> tuple[list[StoredBundle], list[tuple[str, str]]]:
    """One bundle per campaign, in its latest state; the others named with why they do not count again."""
    by_campaign: dict[str, list[StoredBundle]] = {}
    for stored in bundles:
        by_campaign.setdefault(stored.manifest_sha256 or str(stored.path), []).append(stored)
    kept: list[StoredBundle] = []
    skipped: list[tuple[str, str]] = []
    for states in by_campaign.values():
        latest = max(states, key=lambda s: (len(s.seals), -states.index(s)))
        if any(latest.seals[: len(s.seals)] != s.seals for s in states):
            names = ", ".join(str(s.path) for s in states)
            skipped += [(str(s.path), f"copies of one campaign resumed apart (their seals diverge: {names}); none is "
                         "counted") for s in states]
            continue
        kept.append(latest)
        skipped += [(str(s.path), f"the same campaign as {latest.path} ("
                     f"{'a copy' if s.seals == latest.seals else 'an earlier state of it, resumed since'}): counted once")
                    for s in states if s is not latest]
    return kept, skipped


def _key(stored: StoredBundle) -> CampaignKey | None:
    """The campaign over several hosts that the bundle is a shard or a pool of; EvidenceError: a malformed record."""
    where = f"{stored.path}/manifest.json"
    return CampaignKey.of(stored.spec_id, shard_mark(stored.manifest, stored.final_sha256, where=where),
                          pooled_shards(stored.manifest, where=where), stored.seals)


def _shard_first(stored: StoredBundle) -> tuple[int, int, int, str]:
    """The shards in their campaign's order (round, then index), then the other pools by start."""
    mark = shard_mark(stored.manifest, stored.final_sha256)
    return (0, mark.round, mark.index, "") if mark is not None else (1, 0, 0, stored.started_at)


def _what(stored: StoredBundle, key: CampaignKey, pool: StoredBundle, pool_key: CampaignKey) -> str:
    """What a bundle folded into a pool is: one of its shards, an earlier pool of fewer shards, or a re-pool."""
    mark = shard_mark(stored.manifest, stored.final_sha256)
    if mark is not None:
        return f"{mark.label}, host {mark.host}"
    # Shards counted by their marks: a key's seals hold every state of a resumed shard.
    return "a re-pool of the same shards" if key.seals == pool_key.seals else \
        f"a pool of {len(pooled_shards(stored.manifest))} of its {len(pooled_shards(pool.manifest))} shards"


def _held(stored: StoredBundle) -> str:
    """``shard 1/2`` (``shard 1/2, shard 2/2 of round 2``): the shards a pool holds."""
    return ", ".join(m.label for m in pooled_shards(stored.manifest))


def _complementary(keyed: Sequence[tuple[StoredBundle, CampaignKey | None]],
                   counted: Mapping[int, CampaignKey]) -> dict[int, str]:
    """Counted pools that miss shards which another counted pool of the same spec and shard count holds.

    Shards of one round carry no campaign id (each host starts its own run),
    so two pools of different shards may be one campaign or two: counting
    both would count one campaign twice. Each is named with the other.
    """
    shares = {}
    for place in counted:
        marks = pooled_shards(keyed[place][0].manifest)
        places = {(m.round, m.index) for m in marks}
        count = marks[0].count
        if any((r, i) not in places for r, _ in places for i in range(1, count + 1)):  # shards missing
            shares[place] = (counted[place].spec_id, count, places)
    found: dict[int, str] = {}
    for place, (spec_id, count, places) in shares.items():
        for other, (other_id, other_count, other_places) in shares.items():
            if other != place and (other_id, other_count) == (spec_id, count) and not places & other_places:
                found[place] = f"{keyed[other][0].path} ({_held(keyed[other][0])})"
    return found


def _one_per_pool(bundles: list[StoredBundle]) -> tuple[list[tuple[StoredBundle, tuple[str, ...]]],
                                                         list[tuple[str, str]]]:
    """Each campaign over several hosts once, as its fullest pool with what it folds; a shard alone is not counted.

    Of pools of the same shards the first (by start, then path) is counted;
    pools that share a shard while neither folds the other are not counted.
    """
    keyed = [(stored, _key(stored)) for stored in sorted(bundles, key=lambda b: (b.started_at, str(b.path)))]
    pools = [(place, key) for place, (_, key) in enumerate(keyed) if key is not None and key.pooled]
    counted: dict[int, CampaignKey] = {}
    for place, key in pools:
        # A pool of more shards, or an earlier pool of the same ones, holds this one's campaign.
        wider = [k for at, k in pools if at != place and k.folds(key) and (k.seals != key.seals or at < place)]
        if not wider and not any(key.disagrees(k) for _, k in pools):
            counted[place] = key
    kept: list[tuple[StoredBundle, tuple[str, ...]]] = []
    skipped: list[tuple[str, str]] = []
    complementary = _complementary(keyed, counted)
    for place in complementary:
        del counted[place]
    for place, (stored, own) in enumerate(keyed):
        if own is None:
            kept.append((stored, ()))
        elif place in complementary:
            skipped.append((str(stored.path), f"a pool of {_held(stored)} only, and {complementary[place]} holds "
                            "the shards it misses: they may be one campaign's shares or two campaigns', which their "
                            "records cannot tell apart, so neither is counted; pool the shards together with "
                            "h3bench pool"))
        elif place in counted:
            folded = sorted(((other, k) for at, (other, k) in enumerate(keyed)
                             if at != place and k is not None and own.folds(k)), key=lambda pair: _shard_first(pair[0]))
            kept.append((stored, tuple(f"{other.path} ({_what(other, k, stored, own)})" for other, k in folded)))
        elif any(pool.folds(own) for pool in counted.values()):
            continue  # named by the pool that counts it
        elif own.pooled or any(k.folds(own) for _, k in pools):
            skipped.append((str(stored.path), "pools of one campaign that disagree on its shards (they share a shard, "
                            "and neither holds the other's): not counted"))
        else:
            mark = shard_mark(stored.manifest, stored.final_sha256)
            assert mark is not None
            skipped.append((str(stored.path), f"{mark.label} (host {mark.host}) alone is not judged, and not counted: "
                            "no pool of it is among these bundles; pool the shards with h3bench pool"))
    return kept, skipped


def _points(stored: StoredBundle, folded: tuple[str, ...] = ()) -> dict[tuple[str, str, str], CampaignPoint]:
    """Per (duration, workload, command): this bundle's campaign point (baseline blocks that succeeded)."""
    workload = {k: v for k, v in (stored.spec_data.get("workload") or {}).items() if k != "durations"}
    document = stored.document()
    levels = document.baseline if document is not None else {}
    engine = stored.engine().get("engine_commit")
    found = stored.contract()
    contract = Contract({BASELINE: found.arms[BASELINE]}) if BASELINE in found.arms else None
    points = {}
    for key, level in levels.items():
        duration = key.removesuffix("s")
        points[(duration, json.dumps({**workload, "duration": duration}, sort_keys=True), stored.baseline_command())] = \
            CampaignPoint(str(stored.path), stored.started_at, engine, level.median_e2e_s, level.blocks, contract,
                          folded)
    return points


def read_history(dirs: Sequence[Path]) -> History:
    """Every verified, non-diagnostic bundle under ``dirs``, once per campaign, in series; see the module docstring."""
    grouped: dict[tuple[str, str, str, str, str], list[CampaignPoint]] = {}
    skipped: list[tuple[str, str]] = []
    verified: list[StoredBundle] = []
    for path in _bundle_dirs(dirs):
        try:
            stored = open_verified(path)
        except H3BenchError as exc:
            skipped.append((str(path), str(exc)))
            continue
        if stored.diagnostic:
            skipped.append((str(path), "DIAGNOSTIC run (not a campaign result)"))
            continue
        try:
            _key(stored)
        except H3BenchError as exc:
            skipped.append((str(path), str(exc)))
            continue
        verified.append(stored)
    campaigns, again = _one_per_campaign(verified)
    counted, alone = _one_per_pool(campaigns)
    skipped += again + alone
    for stored, folded in counted:
        try:
            points = _points(stored, folded)
            spec = comparable_id(stored)
        except H3BenchError as exc:
            skipped.append((str(stored.path), str(exc)))
            continue
        if not points:
            skipped.append((str(stored.path), "no successful baseline block"))
        for (duration, workload, command), campaign in points.items():
            grouped.setdefault((stored.hardware_kind, duration, workload, command, spec), []).append(campaign)
    series = []
    for (hardware, duration, workload, command, spec), found in sorted(grouped.items()):
        ordered = tuple(sorted(found, key=lambda c: (c.started_at, c.engine_commit or "")))
        steps = detect_steps([c.median_s for c in ordered])
        series.append(Series(hardware, duration, workload, command, ordered, steps, spec))
    return History(tuple(series), tuple(sorted(skipped)))


def _step_line(series: Series, step: Any) -> str:
    campaign = series.campaigns[step.index]
    where = f"#{step.index} ({campaign.started_at[:10]}, engine {(campaign.engine_commit or '-')[:10]})"
    change = f"{(step.ratio - 1) * 100:+.1f} % ({step.before:.4g} s → {step.after:.4g} s)"
    if not step.flagged:
        return f"  proposed step at {where}: {change}; {step.why}"
    if step.ratio < 1:
        return f"  IMPROVEMENT at {where}: {change}; {step.why}"
    lasted = "ongoing" if step.ongoing else "then recovered"
    return (f"  REGRESSION at {where}: {change}; {step.why}; persisted {step.persisted} consecutive "
            f"campaign(s), {lasted}")


def contract_lines(series: Series) -> list[str]:
    """Where the baseline's contract changed between consecutive campaigns that both recorded one."""
    lines, before = [], None
    for index, campaign in enumerate(series.campaigns):
        if campaign.contract is None:
            continue
        if before is not None:
            assert before[1].contract is not None
            for change in contract_changes(before[1].contract, campaign.contract):
                lines.append(f"  CONTRACT CHANGED at #{index} (since #{before[0]}): {change}: the engine these "
                             "campaigns compare is not the same")
        before = (index, campaign)
    return lines


def history_lines(history: History) -> list[str]:
    """The history as text: per series a table of campaigns, then its steps."""
    lines: list[str] = []
    for series in history.series:
        lines.append(f"== {series.title}")
        rows = [("#", "STARTED", "ENGINE", "BLOCKS", "MEDIAN E2E", "BUNDLE")]
        rows += [(str(i), c.started_at[:19], (c.engine_commit or "-")[:12], str(c.blocks), f"{c.median_s:.4f} s",
                  Path(c.bundle).name) for i, c in enumerate(series.campaigns)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
        lines += [f"  #{i} is one campaign over several hosts, pooled; it folds {len(c.folded)} bundle(s), counted "
                  f"once: {'; '.join(c.folded)}" for i, c in enumerate(series.campaigns) if c.folded]
        lines += [_step_line(series, step) for step in series.steps.steps]
        lines += contract_lines(series)
        if not series.steps.flagged:
            lines.append(f"  no step flagged over {len(series.campaigns)} campaign(s)")
    for path, why in history.skipped:
        lines.append(f"skipped {path}: {why}")
    if not history.series:
        lines.append("no campaign with a successful baseline block was found")
    return lines


def history_json(history: History) -> dict[str, Any]:
    """The history as plain JSON data."""
    return {
        "series": [{"hardware": s.hardware, "duration": s.duration, "spec": s.spec, "workload": json.loads(s.workload),
                    "command": json.loads(s.command), "campaigns": [to_json(c) for c in s.campaigns],
                    "contract_changes": contract_lines(s),
                    "pieces": [list(p) for p in s.steps.pieces], "steps": [step.__dict__ for step in s.steps.steps]}
                   for s in history.series],
        "skipped": [{"path": path, "why": why} for path, why in history.skipped],
    }
