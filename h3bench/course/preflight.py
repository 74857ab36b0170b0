"""Before the first block: a formal run's pins, and what the host really runs checked against them.

A **formal** run refuses a RunSpec with fields still ``"UNPINNED"`` or marked
``TODO`` in its TOML file (a ``TODO`` in the field's line, or in the comment
lines right above it), listing them all. ``--allow-unpinned`` runs anyway:
the bundle's manifest says ``DIAGNOSTIC`` and why, and so does the summary.
A spec that says ``diagnostic = true``, or whose steps are not the frozen 50,
makes a DIAGNOSTIC run too (:func:`h3bench.runspec.spec.diagnostic_reasons`);
the manifest's ``run.reasons`` lists every reason, and
:attr:`h3bench.evidence.manifest.Manifest.diagnostic` is how a consumer of a
bundle (``--baseline-evidence``, a ledger) refuses one.

On NPU hosts the manifest records :func:`h3bench.host.inventory.host_evidence` for
every arm's interpreter, and the checkpoint's content identity
(:mod:`h3bench.host.checkpoint`); a mismatch with the spec's pins is a
:class:`~h3bench.errors.RunSpecError` before any server starts: vllm-omni's
commit against ``source.engine_commit``, ``$H3BENCH_IMAGE_DIGEST`` against
``source.image_digest``, the checkpoint against ``model.content_identity``.
What cannot be established (a wheel without a commit, no digest variable,
a model that is not a directory) is recorded as unverified, not guessed.
On the simulator these are recorded as absent.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3bench.course.feasibility import design_problems
from h3bench.errors import RunSpecError
from h3bench.evidence.codec import to_json
from h3bench.evidence.manifest import DIAGNOSTIC, FORMAL, RunKind
from h3bench.host import inventory as host
from h3bench.host.checkpoint import content_identity
from h3bench.runspec import UNPINNED, RunSpec
from h3bench.server.ports import LOCALHOST

__all__ = ["DIAGNOSTIC", "FORMAL", "Preflight", "preflight", "todo_fields", "unpinned_fields"]

_TABLE = re.compile(r"\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=\s*(.*)""")


def todo_fields(text: str) -> list[str]:
    """Field paths of a RunSpec TOML text marked TODO (in their lines, or the comments right above them)."""
    fields: list[str] = []
    table, pending, open_key, depth, string = "", False, "", 0, ""
    for line in text.splitlines():
        stripped = line.strip()
        if string:  # inside a multi-line string: its text is a value, not a marker
            string = "" if string in stripped else string
            continue
        if depth > 0:  # inside a multi-line array
            depth += stripped.count("[") - stripped.count("]")
            if "TODO" in stripped and open_key not in fields:
                fields.append(open_key)
            continue
        if not stripped:
            pending = False
        elif stripped.startswith("#"):
            pending = pending or "TODO" in stripped
        elif match := _TABLE.match(stripped):
            table, pending = match.group(1).replace(" ", ""), False
        elif match := _KEY.match(stripped):
            key = ".".join(part.strip().strip("\"'") for part in match.group(1).split("."))
            open_key, value = f"{table}.{key}" if table else key, match.group(2)
            if (pending or "TODO" in stripped) and open_key not in fields:
                fields.append(open_key)
            pending = False
            for quote in ('"""', "'''"):
                if value.startswith(quote) and value.count(quote) == 1:
                    string = quote
            depth = value.count("[") - value.count("]") if value.startswith("[") else 0
    return fields


def _unpinned_values(value: Any, path: str) -> list[str]:
    if value == UNPINNED:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _unpinned_values(v, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _unpinned_values(v, f"{path}[{i}]")]
    return []


def unpinned_fields(spec: RunSpec, spec_file: Path | None) -> list[str]:
    """Every field that is ``"UNPINNED"``, then every field its TOML file marks TODO, once each."""
    found = _unpinned_values(spec.model_dump(mode="json"), "")
    if spec_file is not None and spec_file.is_file():
        found += [f for f in todo_fields(spec_file.read_text(encoding="utf-8")) if f not in found]
    return found


@dataclass(frozen=True)
class Preflight:
    """What the manifest records about the run before its first block."""

    kind: str  # FORMAL or DIAGNOSTIC
    unpinned: tuple[str, ...]
    host: dict[str, Any]
    unverified: tuple[str, ...]  # pins that the host could not confirm
    reasons: tuple[str, ...] = ()  # why the run is DIAGNOSTIC
    underpowered: tuple[str, ...] = ()  # why the design cannot reach its verdict (h3bench.course.feasibility)

    def run_kind(self) -> RunKind:
        """The manifest's ``run`` record (the manifest's ``host`` is :attr:`host`)."""
        return RunKind(self.kind, self.reasons, self.unpinned, self.unverified, self.underpowered)

    def with_design(self, spec: RunSpec, *, lossless_on: bool, allow_underpowered: bool) -> Preflight:
        """Refuse a design that cannot reach its verdict, or with ``allow_underpowered`` mark the run DIAGNOSTIC."""
        problems = tuple(design_problems(spec, lossless_on=lossless_on))
        if not problems:
            return self
        if not allow_underpowered:
            raise RunSpecError(f"{spec.name}: this design cannot reach the verdict it asks for: {'; '.join(problems)}; "
                               "change the spec (a new frozen spec), or pass --allow-underpowered for a DIAGNOSTIC "
                               "run", field_path="protocol")
        reason = "--allow-underpowered: the design cannot reach the verdict it asks for"
        return dataclasses.replace(self, kind=DIAGNOSTIC, reasons=(*self.reasons, reason), underpowered=problems)



def _mismatch(field: str, pinned: str, found: str, how: str) -> RunSpecError:
    return RunSpecError(f"{field} pins {pinned}, but the host has {found} ({how}); "
                        "a changed environment needs a new frozen RunSpec", field_path=field)


def preflight(
    spec: RunSpec, *, spec_file: Path | None, allow_unpinned: bool, progress: Callable[[str], None] | None = None,
) -> Preflight:
    """Refuse an unpinned formal run, record the host, and check it against the spec's pins."""
    unpinned = tuple(unpinned_fields(spec, spec_file))
    if unpinned and not allow_unpinned:
        raise RunSpecError(
            f"{spec_file or spec.name}: a formal run refuses fields that are UNPINNED or marked TODO: "
            f"{', '.join(unpinned)}; pin them (a new frozen spec), or pass --allow-unpinned for a DIAGNOSTIC run",
            field_path=unpinned[0],
        )
    reasons = tuple([f"--allow-unpinned: {', '.join(unpinned)}"] if unpinned else []) + spec.diagnostic_reasons
    kind = DIAGNOSTIC if reasons else FORMAL
    if spec.hardware.kind == "sim":
        absent = {"engine": None, "cann": None, "driver": None, "npu_smi": None, "image_digest": None,
                  "checkpoint": None, "absent_because": "the simulator runs no engine on no NPU"}
        return Preflight(kind, unpinned, absent, (), reasons)
    unverified: list[str] = []
    engines: dict[str, Any] = {}
    for name, arm in spec.arms.items():
        argv = arm.command(LOCALHOST, 0, spec.model.path)
        engines[name] = host.engine(argv, arm.env)
    evidence = {"engine": engines, **host.host_evidence(spec.baseline.env)}
    source = spec.source
    assert source is not None, "an NPU spec has [source]"
    for name, found in engines.items():
        commit = (found or {}).get("vllm_omni_commit")
        if commit is None:
            unverified.append(f"arms.{name}: vllm-omni's commit ({(found or {}).get('commit_source', 'no interpreter')})")
        elif source.engine_commit != UNPINNED and not source.engine_commit.startswith(commit):
            raise _mismatch("source.engine_commit", source.engine_commit, commit, f"arms.{name}: {found['commit_source']}")
    digest = evidence["image_digest"]
    if digest is None:
        unverified.append(f"source.image_digest (${host.IMAGE_DIGEST_ENV} is not set)")
    elif source.image_digest not in (UNPINNED, digest):
        raise _mismatch("source.image_digest", source.image_digest, digest, f"${host.IMAGE_DIGEST_ENV}")
    model = Path(spec.model.path)
    evidence["checkpoint"] = None
    if model.is_dir():
        identity = content_identity(model, progress=progress)
        evidence["checkpoint"] = to_json(identity)
        if spec.model.content_identity not in (UNPINNED, identity.identity):
            raise _mismatch("model.content_identity", spec.model.content_identity, identity.identity,
                            f"the files of {model}")
    else:
        unverified.append(f"model.content_identity ({model} is not a directory here)")
    return Preflight(kind, unpinned, evidence, tuple(unverified), reasons)
