"""The names inside a bundle: one append-only directory per campaign run.

Layout of a bundle (``<root>/<UTC timestamp>-<spec name>-<spec id[:12]>/``,
:func:`planned_path`)::

    manifest.json            written at creation: spec id and spec, h3bench version,
                             environment, start time, inputs, source and model identity
    samples.jsonl            one line per request; ``kind`` is warmup | measured | audit | profile,
                             ``phase`` formal | heldout | profile (absent: formal)
    servers.jsonl            one line per server process when it is launched (what a
                             resume must stop if the run is killed)
    lifecycle.jsonl          one line per server process, when it has been stopped
    telemetry.jsonl          one line per reserved NPU chip and npu-smi sample during each block
    outputs/<sha256>.mp4     the returned MP4s, named by their content hash
    logs/<name>              server logs, copied in at the end of each block
    profiles/<block>/...     profiler traces of the profiled request (h3bench.run.profiling)
    metrics/<block>/NN.prom  the server's raw GET /metrics, once when it is ready (00) and after each
                             request (h3bench.run.server_metrics; the deltas are in samples.jsonl)
    contracts/<sha256>.<ext> the engine's contract, once per distinct content: its /openapi.json and,
                             for vllm arms, its ``vllm serve --help=all`` (h3bench.run.contract)
    verdict.json             written once
    quality/<version>.json   one result per validator version, beside the older ones
    final.json               written once at close: end time, outcome, and the SHA-256
                             and size of every file the run wrote (h3bench.evidence.seal)
    addenda.jsonl            one line per file added after close (re-validation),
                             with its SHA-256 and size
    resume-<n>/              one segment per resume of an interrupted run: its own
                             resume.json (with the SHA-256 of every earlier final.json,
                             so the last seal pins every segment), samples, servers,
                             lifecycle, logs, quality, verdict and final.json; outputs
                             go to the shared outputs/
    .writer.lock             not evidence: the lock that the one process writing the
                             bundle holds (h3bench.evidence.lock), with its pid

Nothing here reads or writes: :mod:`~h3bench.evidence.reader` reads a bundle,
:mod:`~h3bench.evidence.bundle` writes one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = [
    "ADDENDA",
    "CONTRACTS",
    "DEFAULT_ROOT",
    "FINAL",
    "FORMAT",
    "LIFECYCLE",
    "LOGS",
    "MANIFEST",
    "METRICS",
    "OUTPUTS",
    "OUTPUT_NAME",
    "PROFILES",
    "QUALITY",
    "RESUME",
    "SAMPLES",
    "SAMPLE_KINDS",
    "SERVERS",
    "TELEMETRY",
    "VERDICT",
    "WRITER_LOCK",
    "PathLike",
    "planned_path",
]

FORMAT = "h3bench-evidence/1"
DEFAULT_ROOT = "h3bench-evidence"
SAMPLE_KINDS = ("warmup", "measured", "audit", "profile")

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"
SERVERS = "servers.jsonl"
LIFECYCLE = "lifecycle.jsonl"
RESUME = "resume.json"
TELEMETRY = "telemetry.jsonl"
VERDICT = "verdict.json"
FINAL = "final.json"
ADDENDA = "addenda.jsonl"
OUTPUTS = "outputs"
LOGS = "logs"
QUALITY = "quality"
PROFILES = "profiles"
METRICS = "metrics"
CONTRACTS = "contracts"
WRITER_LOCK = ".writer.lock"  # not evidence: who writes the bundle now (verify and the seals ignore it)

OUTPUT_NAME = re.compile(r"([0-9a-f]{64})\.mp4")

PathLike = str | os.PathLike[str]


def planned_path(root: PathLike, label: str, spec_id: str, started_at: str) -> Path:
    """``<root>/<UTC start>-<label>-<spec id[:12]>``: where a new bundle goes unless that name is taken."""
    label = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._") or "run"
    stamp = started_at[:19].replace("-", "").replace(":", "") + "Z"
    return Path(root) / f"{stamp}-{label}-{spec_id[:12]}"
