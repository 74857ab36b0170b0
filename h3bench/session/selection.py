"""What a session's options select, decided before any server starts.

``--arm candidate`` runs only the candidate's blocks, so it needs a stored
baseline of the same spec (``--baseline-evidence``): its quality references,
its share of the lossless test and the day's shift. Without one, the run is
refused at collection with the exact command that runs it, naming the newest
stored bundle that qualifies when the evidence directory holds one, or the
baseline run that makes one. ``--baseline-evidence`` without ``--arm
candidate`` is refused too: every other arm runs its own baseline blocks.

``-m`` and ``-k`` may select any part of the schedule: the verdict then
covers the durations whose blocks ran, and says which were not selected
(:attr:`h3bench.verdict.verdicts.VerdictDocument.not_selected`).

A race spec (``design = "race"``) is refused whatever the options: ``h3bench
plan`` prices it, but no session runs one yet
(:data:`h3bench.course.design.RACE_NOT_RUN_LIVE`).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from h3bench.course.design import RACE_NOT_RUN_LIVE, Design
from h3bench.errors import H3BenchError, UsageError
from h3bench.evidence import BundleReader
from h3bench.runspec import BASELINE, RunSpec
from h3bench.session.settings import Settings

__all__ = ["require_runnable", "stored_baselines"]


def stored_baselines(spec: RunSpec, root: Path) -> list[Path]:
    """Sealed, formal bundles of ``spec`` under ``root`` that ran baseline blocks, newest first."""
    found = []
    for manifest in sorted(root.glob("*/manifest.json"), reverse=True):  # names start with the start time
        try:
            bundle = BundleReader.open(manifest.parent)
            if bundle.spec_id != spec.spec_id or not bundle.is_complete or bundle.manifest.diagnostic:
                continue
            if any(s.get("arm") == BASELINE and s.get("kind") == "measured" for s in bundle.samples()):
                found.append(bundle.path)
        except (H3BenchError, OSError, ValueError):
            continue  # not a bundle this run could be anchored to; `h3bench validate` says why
    return found


def _typed(settings: Settings) -> list[str]:
    """The command as typed, or the smallest one that repeats it."""
    if settings.command:
        return list(settings.command)
    return ["pytest", "--runspec", str(settings.runspec), "--arm", settings.arm]


def _with_arm(args: Sequence[str], arm: str) -> list[str]:
    out, skip = [], False
    for index, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == "--arm" and index + 1 < len(args):
            out += ["--arm", arm]
            skip = True
        elif arg.startswith("--arm="):
            out.append(f"--arm={arm}")
        else:
            out.append(arg)
    return out


def require_runnable(spec: RunSpec, settings: Settings) -> None:
    """Refuse, before any server starts, a race, or an arm selection whose schedule cannot reach a verdict."""
    if Design.of(spec).race:
        raise UsageError(RACE_NOT_RUN_LIVE)
    if settings.baseline_evidence is not None and settings.arm != "candidate":
        raise UsageError(f"--baseline-evidence anchors a candidate-only run, and --arm {settings.arm} runs its own "
                         "baseline blocks: add --arm candidate, or leave --baseline-evidence out")
    if settings.arm != "candidate" or settings.baseline_evidence is not None:
        return
    typed = _typed(settings)
    found = stored_baselines(spec, settings.evidence_root)
    head = (f"--arm candidate runs only the candidate's blocks and judges them against a stored baseline run of "
            f"{spec.name} (--baseline-evidence): its outputs are the quality references and its blocks the lossless "
            "test's baseline processes")
    if found:
        raise UsageError(f"{head}. The newest one under {settings.evidence_root} is {found[0]}; run:\n  "
                         + shlex.join([*typed, "--baseline-evidence", str(found[0])]))
    raise UsageError(f"{head}, and {settings.evidence_root} holds none. Run the baseline first, then the candidate "
                     "against the bundle it writes:\n  " + shlex.join(_with_arm(typed, BASELINE)) + "\n  "
                     + shlex.join([*typed, "--baseline-evidence", f"{settings.evidence_root}/<that bundle>"]))
