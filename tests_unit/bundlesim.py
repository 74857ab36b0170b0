"""Real sealed evidence bundles without servers, for the ledger and history tests.

:func:`write_bundle` writes a bundle with the project's own writer
(:class:`h3bench.evidence.Bundle`): a manifest with the spec, one measured
sample per request and one lifecycle record per block of the spec's
schedule, a verdict made by :class:`h3bench.verdict.verdicts.CandidateVerdict`, and
``final.json``. The latencies are the caller's. ``final`` adds the keys that
the research protocol's writer puts in ``final.json`` (held-out, acceptance),
standing in for that writer (which writes them at close).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from h3bench import quality
from h3bench.evidence import Bundle
from h3bench.outcome import Outcome
from h3bench.runspec import RunSpec, load_runspec, parse_runspec
from h3bench.runspec.schedule import Block, Schedule
from h3bench.verdict.verdicts import CandidateVerdict, DurationVerdict

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


def verdict_of(spec: RunSpec, parts: Mapping[str, Mapping[str, Outcome]]) -> dict[str, Any]:
    """verdict.json as a campaign writes it; ``parts[candidate]`` gives ``speed`` and ``quality`` outcomes."""
    candidates = {}
    for candidate in spec.candidates:
        part = parts.get(candidate, {})
        speed = part.get("speed", Outcome.PASS)
        durations = {f"{d:g}s": DurationVerdict(speed, (f"speed {speed} (simulated)",), None,
                                                 part.get("quality", Outcome.PASS), 3, False, None)
                     for d in spec.workload.durations}
        candidates[candidate] = CandidateVerdict(durations, None).to_dict()
    return {"spec_id": spec.spec_id, "run": "FORMAL", "interrupted": None, "candidates": candidates}


def write_bundle(root: Path, spec: RunSpec, latency: Callable[[Block, int], float], *,
                 started_at: str, verdict: dict[str, Any] | None = None, final: dict[str, Any] | None = None,
                 spec_extra: Mapping[str, Any] | None = None, run_kind: str = "FORMAL",
                 engine_commit: str | None = None) -> Path:
    """A sealed bundle whose measured requests took ``latency(block, index)`` seconds."""
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
    bundle = Bundle.create(root, spec_id=spec.spec_id, spec=data, inputs={}, source=source, model=data["model"],
                           started_at=started_at, extra={"run": {"kind": run_kind, "unpinned": [], "unverified": []}})
    for block in Schedule(spec).blocks:
        for index in range(spec.protocol.requests_per_block):
            bundle.append_sample({"block_id": block.id, "kind": "measured", "index": index, "seed": 0, "ok": True,
                                  "e2e_s": latency(block, index), "arm": block.arm, "candidate": block.candidate,
                                  "duration": block.duration, "position": block.position})
        bundle.append_lifecycle({"block": block.id, "arm": block.arm, "duration": block.duration,
                                 "position": block.position, "failure": None, "interrupted": None})
    # What the run's validator judged (the pairs are not simulated): names the validator version in the bundle.
    bundle.write_quality(quality.VALIDATOR_VERSION, {"pairs": {}, "lossless": {}})
    bundle.write_verdict(verdict if verdict is not None else verdict_of(spec, {}))
    bundle.close()
    if final:
        path = bundle.path / "final.json"
        document = {**json.loads(path.read_text()), **final}
        path.unlink()
        path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return bundle.path
