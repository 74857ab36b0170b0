"""Real sealed evidence bundles without servers, for the ledger and history tests.

:func:`write_bundle` writes a bundle with the project's own writer
(:class:`h3bench.evidence.Bundle`): a manifest with the spec, one measured
sample per request and one lifecycle record per block of the spec's
schedule, the verdict that the project's own results give for those samples
(:class:`h3bench.session.results.Results`, so the estimates are the ones a
campaign would write), and ``final.json``. The latencies are the caller's.
``parts`` overrides a candidate's speed or quality outcome (the pairs are
not simulated: quality is PASS unless given, and lossless is not judged); ``heldout`` and ``accepted``
stand in for the research phase, as the runner writes them into verdict.json.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from h3bench import quality
from h3bench.course.cases import Block
from h3bench.course.schedule import Schedule
from h3bench.evidence import Bundle
from h3bench.evidence.codec import to_json
from h3bench.evidence.manifest import Manifest, RunKind
from h3bench.outcome import Outcome
from h3bench.run.contract import ContractPart, ServerContract
from h3bench.runspec import RunSpec, load_runspec, parse_runspec
from h3bench.session.results import Results
from h3bench.session.settings import Settings
from h3bench.verdict.assemble import candidate_verdicts, document
from h3bench.verdict.verdicts import Acceptance, HeldoutVerdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runspecs"
# What npu_spec gives a new candidate that declares nothing: a formal NPU spec attributes every candidate.
ATTRIBUTION = {"hypothesis": "It is faster.", "source": {"kind": "code", "ref": "bundlesim"}}


def npu_spec(kind: str = "910b1", devices: int = 8, **arms: dict[str, Any]) -> RunSpec:
    """The 8x910B1 fixture spec (4 devices: the 950PR one), on another hardware kind or with other candidates.

    Each new candidate gets :data:`ATTRIBUTION` unless ``arms`` gives its own.
    """
    fixture = "910b1-x8.toml" if devices == 8 else "950pr-x4.toml"
    data = load_runspec(FIXTURES / fixture).model_dump(mode="json")
    data["hints"] = None  # the hints name the fixture's own candidates
    data["hardware"] = {"kind": kind, "device_ids": list(range(devices))}
    if arms:
        baseline = data["arms"]["baseline"]
        data["arms"] = {"baseline": baseline,
                        **{name: {**copy.deepcopy(baseline), **copy.deepcopy(ATTRIBUTION), **arm}
                           for name, arm in arms.items()}}
    return parse_runspec(data, source="bundlesim")


def write_bundle(root: Path, spec: RunSpec, latency: Callable[[Block, int], float], *,
                 started_at: str, parts: Mapping[str, Mapping[str, Outcome]] | None = None,
                 heldout: Mapping[str, dict[str, HeldoutVerdict]] | None = None, accepted: Acceptance | None = None,
                 final: dict[str, Any] | None = None,
                 spec_extra: Mapping[str, Any] | None = None, run_kind: str = "FORMAL",
                 engine_commit: str | None = None, stop_after: int | None = None,
                 contract: Mapping[str, tuple[bytes, bytes | None]] | None = None,
                 manifest_extra: Mapping[str, Any] | None = None,
                 lifecycle: Callable[[Block], Mapping[str, Any]] | None = None,
                 sample: Callable[[Block, int], Mapping[str, Any]] | None = None) -> Path:
    """A sealed bundle whose measured requests took ``latency(block, index)`` seconds.

    ``stop_after``: only the first blocks ran, and the bundle is sealed as
    interrupted (as Ctrl-C seals it); :func:`resume_bundle` runs the rest.
    ``contract`` gives, per arm, what its servers answered as ``/openapi.json``
    and ``vllm serve --help=all`` (None: not a vllm arm); each block records it
    as a real server start does (:mod:`h3bench.run.contract`). ``manifest_extra``:
    more top-level manifest records (as a shard's ``shard`` record). ``lifecycle``: more fields of
    each block's lifecycle line (as its server's ``startup_phases``); ``sample``: more fields of
    each measured request's sample (its ``stage_durations``), and index -1 is the block's warmup request.
    """
    data = spec.model_dump(mode="json")
    for key, value in (spec_extra or {}).items():  # research fields: arms.<name>.<field> or a top-level key
        if key.startswith("arms."):
            _, arm, field = key.split(".")
            data["arms"][arm][field] = value
        else:
            data[key] = value
    source = data.get("source") or {"kind": "simulator"}
    if engine_commit is not None:
        source = {**source, "engine_commit": engine_commit}
    bundle = Bundle.create(root, Manifest.new(spec_id=spec.spec_id, spec=data, source=source, model=data["model"],
                                              started_at=started_at, run=RunKind(run_kind), **(manifest_extra or {})))
    blocks = Schedule(spec).blocks
    _run_blocks(bundle, spec, blocks[:stop_after], latency, contract, lifecycle, sample)
    interrupted = "interrupted (KeyboardInterrupt)" if stop_after is not None else None
    _seal(bundle, spec, parts=parts, heldout=heldout, accepted=accepted, interrupted=interrupted)
    if final:
        path = bundle.path / "final.json"
        document = {**json.loads(path.read_text()), **final}
        path.unlink()
        path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return bundle.path


def resume_bundle(path: Path, spec: RunSpec, latency: Callable[[Block, int], float]) -> Path:
    """Resume an interrupted bundle of :func:`write_bundle` as ``--resume`` does: its missing blocks, then the seal."""
    bundle = Bundle.resume(path, {"session": "bundlesim-resume", "spec_id": spec.spec_id})
    done = {e["block"] for e in bundle.lifecycle()}
    _run_blocks(bundle, spec, [b for b in Schedule(spec).blocks if b.id not in done], latency)
    _seal(bundle, spec)
    return bundle.path


def _run_blocks(bundle: Bundle, spec: RunSpec, blocks: Sequence[Block], latency: Callable[[Block, int], float],
                contract: Mapping[str, tuple[bytes, bytes | None]] | None = None,
                lifecycle: Callable[[Block], Mapping[str, Any]] | None = None,
                sample: Callable[[Block, int], Mapping[str, Any]] | None = None) -> None:
    for block in blocks:
        for index in range(-1 if sample else 0, spec.protocol.requests_per_block):
            bundle.append_sample({"block_id": block.id, "kind": "measured" if index >= 0 else "warmup",
                                  "index": max(index, 0), "seed": 0, "ok": True, "e2e_s": latency(block, index),
                                  "arm": block.arm, "candidate": block.candidate, "duration": block.duration,
                                  "position": block.position, **(sample(block, index) if sample else {})})
        recorded = None
        if contract is not None and block.arm in contract:
            openapi, engine_help = contract[block.arm]
            files = [bundle.store_contract(data, suffix) if data is not None else None
                     for data, suffix in ((openapi, "json"), (engine_help, "txt"))]
            recorded = ServerContract(ContractPart(*files[0]) if files[0] else ContractPart(None, None, "none"),
                                      ContractPart(*files[1]) if files[1] else None)
        bundle.append_lifecycle({"block": block.id, "arm": block.arm, "duration": block.duration,
                                 "position": block.position, "failure": None, "interrupted": None,
                                 "contract": to_json(recorded), **(lifecycle(block) if lifecycle else {})})


def _seal(bundle: Bundle, spec: RunSpec, *, parts: Mapping[str, Mapping[str, Outcome]] | None = None,
          heldout: Mapping[str, dict[str, HeldoutVerdict]] | None = None, accepted: Acceptance | None = None,
          interrupted: str | None = None) -> None:
    # What the run's validator judged (the pairs are not simulated): names the validator version in the bundle.
    bundle.write_quality(quality.VALIDATOR_VERSION, {"pairs": {}, "lossless": {}})
    results = Results(spec, Settings(None), bundle=bundle)
    verdicts = {}
    for name, verdict in candidate_verdicts(results).items():
        part = (parts or {}).get(name, {})
        durations = {key: dataclasses.replace(d, speed=part.get("speed", d.speed),
                                              quality=part.get("quality", Outcome.PASS), quality_pairs=3,
                                              lossless_enabled=False, lossless=None)
                     for key, d in verdict.durations.items()}
        verdicts[name] = dataclasses.replace(verdict, durations=durations)
    bundle.write_verdict(document(results, verdicts=verdicts, heldout=heldout, accepted=accepted,
                                  interrupted=interrupted).to_dict())
    bundle.close(interrupted=interrupted)
