"""The fan-in: the shards' blocks in one new sealed bundle, judged with host as a blocking factor.

The pooled bundle holds every shard's finished blocks (their samples,
lifecycle records and outputs: block ids are the campaign's, so the union
has each block once), the shards' quality results merged (matched pairs are
whole within a shard), and a manifest that names each shard by its seal and
host. So ``h3bench report``, ``ledger add`` and ``history`` read it as any
other bundle, and its ``verdict.json`` is a
:class:`~h3bench.verdict.verdicts.VerdictDocument` with a ``pool`` record.

The verdict is the campaign's own code over every pair
(:class:`h3bench.session.results.Results`: the pooled look, quality on every
matched pair), then, per candidate and duration:

- **speed**: each host's ratio and bounds, the host × arm interaction check,
  and where the hosts disagree beyond chance the hosts' interval decides
  (:func:`h3bench.stats.hosts.pooled_codes`, the function the error-rate
  simulation calls);
- **lossless**, judged within hosts: each shard ran the relabelling test on
  its own host's processes; the pooled verdict is FAIL when a host's p is at
  or below the level divided by the number of hosts (Bonferroni), PASS when
  every host's test reached PASS, else INCONCLUSIVE naming the hosts;
- a host whose **baseline** stands out against the others is named
  (:func:`h3bench.stats.hosts.baseline_outliers`);
- **missing shards** make every outcome INCONCLUSIVE, and are named;
- a pool that fails (blocks two shards both hold, pairs that are not AB or
  BA) writes nothing: its half-written bundle is removed;
- a shard whose engine's **contract** (:mod:`h3bench.run.contract`) differs
  from the first shard's is named in the run's notes: its hosts ran another
  engine under the same spec.

Each copied block keeps its evidence whole: the raw ``/metrics`` scrapes its
samples name and the contract files its lifecycle record names are copied
too, and the records point at the copies.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from h3bench import quality
from h3bench.course.design import budget_of, lossless_level, series_of
from h3bench.errors import UsageError
from h3bench.evidence import SAMPLES, Bundle, BundleReader
from h3bench.evidence.codec import to_json
from h3bench.evidence.manifest import DIAGNOSTIC, FORMAL, Manifest, RunKind
from h3bench.evidence.verify import final_sha256
from h3bench.host.environment import environment
from h3bench.outcome import Outcome
from h3bench.pool.shards import ShardBundle, Shards, read_shards
from h3bench.run.contract import Contract, contract_changes
from h3bench.run.records import BlockResult, finished_attempts
from h3bench.runspec import BASELINE, RunSpec
from h3bench.session.results import Results
from h3bench.session.revalidation import load_quality
from h3bench.session.settings import Settings
from h3bench.stats import hosts as host_stats
from h3bench.stats import intervals
from h3bench.stats.blockstat import block_log_statistics
from h3bench.verdict.assemble import candidate_verdicts
from h3bench.verdict.assemble import document as verdict_document
from h3bench.verdict.verdicts import (
    CandidateVerdict,
    DurationVerdict,
    LosslessSummary,
    PooledSeries,
    PoolRecord,
    ShardRecord,
    VerdictDocument,
    duration_key,
)

__all__ = ["Pooled", "contract_notes", "pool_bundles", "pooled_results"]

_CODE = {Outcome.PASS: intervals.PASS, Outcome.FAIL: intervals.FAIL, Outcome.INCONCLUSIVE: intervals.INCONCLUSIVE}
_OUTCOME = {v: k for k, v in _CODE.items()}


@dataclass(frozen=True)
class Pooled:
    """What :func:`pool_bundles` wrote: the sealed bundle, its verdict, and its anchor."""

    path: Path
    document: VerdictDocument
    anchor: str


def _copy_scrapes(source: BundleReader, into: Bundle, record: dict[str, Any], copied: dict[str, str]) -> dict[str, Any]:
    """The sample with its raw /metrics scrapes copied into the pooled bundle, and pointing at the copies."""
    scrapes = record.get("scrapes")
    if not isinstance(scrapes, dict):
        return record
    moved: dict[str, str | None] = {}
    for side, relpath in scrapes.items():
        if relpath and relpath not in copied:
            name = Path(relpath)
            copied[relpath] = into.store_scrape(str(record["block_id"]), int(name.stem),
                                                (source.path / name).read_text(encoding="utf-8"))
        moved[side] = copied[relpath] if relpath else None
    return {**record, "scrapes": moved}


def _copy_contract(source: BundleReader, into: Bundle, event: dict[str, Any]) -> dict[str, Any]:
    """The lifecycle record with its contract files copied into the pooled bundle (stored once per content)."""
    contract = event.get("contract")
    if not isinstance(contract, dict):
        return event
    moved = dict(contract)
    for key in ("openapi", "help"):
        part = contract.get(key)
        if isinstance(part, dict) and part.get("relpath"):
            relpath = str(part["relpath"])
            _, moved_to = into.store_contract((source.path / relpath).read_bytes(), relpath.rsplit(".", 1)[-1])
            moved[key] = {**part, "relpath": moved_to}
    return {**event, "contract": moved}


def _copy_blocks(shard: ShardBundle, into: Bundle, seen: dict[str, str], stored: set[str]) -> int:
    """Copy the shard's finished blocks (samples of their finished attempt, lifecycle, outputs, the scrapes and
    contract files they name); their count."""
    source = BundleReader.open(shard.path)
    finished = finished_attempts(source)
    for block in finished:
        if block in seen:
            raise UsageError(f"block {block} is in {shard.path} and in {seen[block]}: shards never share a block, "
                             "so these are not shards of one campaign")
        seen[block] = str(shard.path)
    copied: dict[str, str] = {}
    for segment, record in source.by_segment(SAMPLES):
        attempt = finished.get(str(record.get("block_id")))
        if attempt is None or attempt[0] != segment:
            continue  # an interrupted attempt: it stays in the shard, no statistic uses it
        into.append_sample(_copy_scrapes(source, into, dict(record), copied))
        sha = record.get("output_sha256")
        if sha and sha not in stored:
            into.store_output(source.output_path(sha))
            stored.add(sha)
    for _, event in finished.values():
        into.append_lifecycle(_copy_contract(source, into, dict(event)))
    return len(finished)


def contract_notes(contracts: Sequence[tuple[str, Contract]]) -> tuple[str, ...]:
    """One note per shard whose engine's contract differs from the first shard's (what both recorded)."""
    if not contracts:
        return ()
    (first, reference), notes = contracts[0], []
    for label, contract in contracts[1:]:
        notes += [f"contract changed between shards: {label} against {first}: {change}: these hosts ran "
                  "another engine under the same spec" for change in contract_changes(reference, contract)]
    return tuple(notes)


def _quality(shards: Shards) -> tuple[dict[str, Any] | None, dict[str, dict[str, dict[str, Any]]]]:
    """The shards' newest quality results merged (pairs are whole within a shard), and each host's lossless results."""
    merged: dict[str, Any] | None = None
    by_host: dict[str, dict[str, dict[str, Any]]] = {}
    for shard in shards.bundles:
        source = BundleReader.open(shard.path)
        versions = source.quality_versions()
        if not versions:
            continue
        found = source.read_quality(versions[-1])
        if merged is None:
            merged = {"validator_version": found.get("validator_version"), "pairs": {}, "lossless": {},
                      "decoded_digests": {}}
        merged["pairs"].update(found.get("pairs", {}))
        merged["decoded_digests"].update(found.get("decoded_digests", {}))
        for case, result in found.get("lossless", {}).items():
            by_host.setdefault(case, {})[f"{shard.host_name} ({shard.label})"] = result
    return merged, by_host


def _pair_logs(spec: RunSpec, results: Sequence[BlockResult]) -> list[tuple[int, float]]:
    """Each complete AB/BA pair of a series as (global pair index, log ratio), as the looks compute it."""
    budget = budget_of(spec)
    by_pair: dict[int, dict[str, BlockResult]] = {}
    for result in results:
        by_pair.setdefault(result.block.pair, {})[result.block.letter] = result
    found = []
    for pair, blocks in sorted(by_pair.items()):
        if set(blocks) != {"A", "B"}:
            continue
        rows = []
        for letter in "AB":
            r = blocks[letter]
            measured = [s.e2e_s for s in r.measured if s.ok and s.e2e_s is not None]
            audit = [s.e2e_s for s in r.samples if s.kind == "audit" and s.phase == "formal" and s.ok]
            if not r.ok or len(measured) != budget.measured or (budget.audit and not audit):
                break
            rows.append([*measured, *(audit[:1] if budget.audit else [])])
        if len(rows) == 2:
            logs = block_log_statistics(np.asarray(rows, dtype=float)[None], budget)[0]
            found.append((pair, float(logs[1] - logs[0])))
    return found


def _speed(spec: RunSpec, results: Results, hosts: Mapping[str, str], duration: float, candidate: str,
           verdict: DurationVerdict) -> tuple[DurationVerdict, PooledSeries]:
    """The series' speed with host as a block: per-host lines, the interaction check, the hosts' interval."""
    pairs = _pair_logs(spec, results.series(duration, candidate))
    host_of_pair = {r.block.pair: hosts[r.block.id] for r in results.series(duration, candidate)}
    names = list(dict.fromkeys(host_of_pair[p] for p, _ in pairs))
    by_host = {h: [math.exp(v) for p, v in pairs if host_of_pair[p] == h] for h in names}
    levels = intervals.error_levels(len(spec.workload.durations), len(series_of(spec)))
    found = results.decision(duration, candidate)
    pass_level = found.pass_level if found is not None and found.pass_level is not None else levels.pass_level
    fail_level = found.fail_level if found is not None and found.fail_level is not None else levels.fail_level
    effects = host_stats.host_effects(by_host, pass_level or levels.pass_level, fail_level or levels.fail_level)
    used = pairs[: found.pairs] if found is not None and found.look is not None else pairs
    check = host_stats.interaction({h: [math.exp(v) for p, v in used if host_of_pair[p] == h] for h in names})
    outcome, extra = verdict.speed, []
    hosts_interval: tuple[float | None, float | None, float | None] = (None, None, None)
    if check.disagree and found is not None and found.look is not None:
        labels = [names.index(host_of_pair[p]) for p, _ in used]
        logs = np.array([v for _, v in used])
        codes, _ = host_stats.pooled_codes(np.array(_CODE[verdict.speed]), logs, labels, pass_level or 0.25,
                                           fail_level or 0.25, spec.gates.speed_margin)
        ratio, lower, upper = host_stats.hosts_bounds(logs, labels, pass_level or 0.25, fail_level or 0.25)
        hosts_interval = (float(ratio), float(lower), float(upper))
        outcome = _OUTCOME[int(codes)]
        extra.append(f"the hosts disagree beyond chance ({check.describe()}), so the hosts' interval decides: "
                     f"mean of the per-host ratios {float(ratio):.4f}, bounds [{float(lower):.4f}, {float(upper):.4f}]"
                     f" over {len(names)} hosts ({len(names) - 1} df): speed {outcome}; hosts "
                     + "; ".join(e.describe() for e in effects))
    else:
        extra.append(check.describe())
    extra += [f"host {e.describe()}" for e in effects]
    pooled = PooledSeries(effects, check, verdict.speed, *hosts_interval)
    reasons = (*extra[:1], *verdict.speed_reasons, *extra[1:]) if check.disagree else \
        (*verdict.speed_reasons, *extra)
    return dataclasses.replace(verdict, speed=outcome, speed_reasons=reasons), pooled


def _lossless(spec: RunSpec, duration: float, found: Mapping[str, Mapping[str, Any]]) -> LosslessSummary:
    """The lossless verdict judged within hosts: each host's relabelling test, Bonferroni over the hosts."""
    if not found:
        return LosslessSummary(Outcome.INCONCLUSIVE, False, ("no host judged lossless at this duration",))
    alpha = lossless_level(spec, duration)
    level = alpha / len(found)
    rejected = [h for h, r in found.items() if r.get("p_value") is not None and float(r["p_value"]) <= level]
    passed = [h for h, r in found.items() if r.get("outcome") == "PASS"]
    lines = [f"{h}: {r.get('outcome')}, p = {r.get('p_value')}, {r.get('baseline_processes')} baseline + "
             f"{r.get('candidate_processes')} candidate processes" for h, r in found.items()]
    if rejected:
        outcome, head = Outcome.FAIL, (f"the candidate's processes stand out within host(s) {', '.join(rejected)} "
                                       f"(p ≤ {alpha:g} / {len(found)} hosts)")
    elif len(passed) == len(found):
        outcome, head = Outcome.PASS, (f"no deviation beyond the control variability detected within any of "
                                       f"{len(found)} hosts (each host's relabelling test; Bonferroni over hosts)")
    else:
        outcome, head = Outcome.INCONCLUSIVE, ("the relabelling test reached no verdict within host(s) "
                                               + ", ".join(h for h in found if h not in passed))
    processes = [(int(r.get("baseline_processes") or 0), int(r.get("candidate_processes") or 0))
                 for r in found.values()]
    p_values = [float(r["p_value"]) for r in found.values() if r.get("p_value") is not None]
    return LosslessSummary(outcome, all(bool(r.get("exact")) for r in found.values()), (head, *lines),
                           min(p_values) * len(found) if p_values else None, sum(b for b, _ in processes),
                           sum(c for _, c in processes))


def pooled_results(bundle: BundleReader, spec: RunSpec, *, lossless: bool) -> Results:
    """The campaign's results over the pooled bundle's blocks, its quality results loaded."""
    settings = Settings(None, "all", bundle.path.parent, lossless=lossless)
    results = Results(spec, settings, bundle_path=bundle.path, bundle=bundle)
    load_quality(results)
    return results


def _run_record(shards: Shards) -> RunKind:
    """The pooled run's kind: DIAGNOSTIC when any shard was, with its reasons."""
    kinds = [(s, s.stored.manifest.run or RunKind(FORMAL)) for s in shards.bundles]
    reasons = tuple(f"{s.label}: {r}" for s, run in kinds for r in run.reasons)
    diagnostic = any(run.diagnostic for _, run in kinds)
    return RunKind(DIAGNOSTIC if diagnostic else FORMAL, reasons if diagnostic else (),
                   tuple(sorted({u for _, run in kinds for u in run.unpinned})),
                   tuple(sorted({u for _, run in kinds for u in run.unverified})),
                   tuple(sorted({u for _, run in kinds for u in run.underpowered})))


def pool_bundles(paths: Sequence[str | Path], out: str | Path, *,
                 progress: Callable[[str], None] = lambda line: None) -> Pooled:
    """Verify and check the shards, write the pooled bundle under ``out``, judge it and seal it."""
    shards = read_shards(paths)
    first = shards.first.stored
    spec = first.runspec()
    manifest = first.manifest
    bundle = Bundle.create(Path(out), Manifest.new(
        spec_id=first.spec_id, spec=manifest.spec, inputs=manifest.inputs, source=manifest.source, model=manifest.model,
        run=_run_record(shards), host=manifest.host,
        pool={"shards": [to_json(s.pooled()) for s in shards.bundles], "missing": list(shards.missing)},
        arms=manifest.arms, lpips_weights=manifest.lpips_weights, environment=environment()),
        name=f"{spec.name}-pooled")
    try:
        seen: dict[str, str] = {}
        stored: set[str] = set()
        hosts: dict[str, str] = {}
        records: list[ShardRecord] = []
        for shard in shards.bundles:
            before = set(seen)
            records.append(shard.pooled(_copy_blocks(shard, bundle, seen, stored)).record())
            hosts.update({block: shard.host_name for block in set(seen) - before})
            progress(f"h3bench pool: {shard.label} from host {shard.host_name}: {records[-1].blocks} blocks "
                     f"({shard.path.name}, seal {shard.stored.final_sha256[:16]}…)")
        merged, lossless_by_case = _quality(shards)
        if merged is not None:
            bundle.write_quality(str(merged.get("validator_version") or quality.VALIDATOR_VERSION), merged)
        document = _judge(spec, bundle, shards, records, hosts, lossless_by_case)
        bundle.write_verdict(document.to_dict())
        bundle.close()
    except BaseException:
        # A pooled bundle is built from the shards, which stay as they are: a pool that failed leaves nothing that
        # the ledger or the history could take for the campaign's account.
        bundle.close(error="h3bench pool failed")
        shutil.rmtree(bundle.path, ignore_errors=True)
        progress(f"h3bench pool: failed; nothing was written ({bundle.path.name} removed)")
        raise
    anchor = final_sha256(bundle.path)
    assert anchor is not None
    return Pooled(bundle.path, document, anchor)


def _lossless_on(shards: Shards) -> bool:
    for shard in shards.bundles:
        document = shard.stored.document()
        if document is not None and any(d.lossless_enabled for c in document.candidates.values()
                                        for d in c.durations.values()):
            return True
    return False


def _judge(spec: RunSpec, bundle: BundleReader, shards: Shards, records: list[ShardRecord], hosts: Mapping[str, str],
           lossless_by_case: Mapping[str, Mapping[str, Any]]) -> VerdictDocument:
    results = pooled_results(bundle, spec, lossless=_lossless_on(shards))
    verdicts = candidate_verdicts(results)
    missing = (f"missing: {', '.join(shards.missing)}: the campaign's pairs are incomplete, so no outcome is "
               "concluded",) if shards.missing else ()
    pooled: dict[str, dict[str, PooledSeries]] = {}
    out: dict[str, CandidateVerdict] = {}
    for name, verdict in verdicts.items():
        durations = {}
        for key, d in verdict.durations.items():
            duration = float(key.removesuffix("s"))
            d, found = _speed(spec, results, hosts, duration, name, d)
            pooled.setdefault(name, {})[key] = found
            if d.lossless_enabled:
                d = dataclasses.replace(d, lossless=_lossless(spec, duration, lossless_by_case.get(key + "-" + name,
                                                                                                   {})))
            if missing:
                d = dataclasses.replace(d, speed=Outcome.INCONCLUSIVE, speed_reasons=(*missing, *d.speed_reasons))
            durations[key] = d
        out[name] = dataclasses.replace(verdict, durations=durations)
    outliers = {}
    for duration in spec.workload.durations:
        levels: dict[str, list[float]] = {}
        for result in results.ran.values():
            if (result.block.duration == duration and result.block.arm == BASELINE and result.ok
                    and result.median_e2e_s is not None):
                levels.setdefault(hosts[result.block.id], []).append(result.median_e2e_s)
        outliers[duration_key(duration)] = host_stats.baseline_outliers(levels)
    notes = tuple(f"{key}: {o.describe()}" for key, found in outliers.items() for o in found)
    out = {n: dataclasses.replace(v, notes=(*v.notes, *notes)) for n, v in out.items()}
    document = verdict_document(results, verdicts=out)
    names = ", ".join(f"{r.host} ({r.index}/{r.count}, round {r.round})" for r in records)
    contracts = contract_notes([(f"{s.label} (host {s.host_name})", s.stored.contract()) for s in shards.bundles])
    run_notes = (f"pooled over {len(records)} shard bundle(s) of {shards.count} shards: {names}", *missing,
                 *contracts, *document.run_notes)
    return dataclasses.replace(document, run_notes=run_notes,
                               pool=PoolRecord(tuple(records), shards.missing, pooled, outliers))
