"""A candidate-only run's stored baseline: the checks that it may be one, and the refusal once today's engine differs.

``--arm candidate --baseline-evidence BUNDLE`` runs only today's anchored
orders; everything else of the schedule is the stored bundle's (its
baseline blocks, the quality references, the day's shift). A stored bundle
is refused (:func:`check_stored_baseline`) when it is of another spec, a
DIAGNOSTIC run, holds no successful baseline block, or was measured on
another engine: before any server starts, each vllm arm's
``vllm serve --help=all`` must still be what it was
(:func:`engines_today`), and once a server of today has recorded its
contract at its start, every candidate stops if it differs
(:func:`contract_refused`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from h3bench.course.preflight import diagnostic_reasons, is_diagnostic
from h3bench.errors import EvidenceError
from h3bench.evidence import BundleReader
from h3bench.run.contract import ArmContract, Contract, contract_changes, engine_help
from h3bench.run.records import BlockResult
from h3bench.runspec import RunSpec, VllmArm, require_same_spec

__all__ = ["check_stored_baseline", "contract_refused", "engines_today"]


def engines_today(spec: RunSpec) -> Contract:
    """Today's ``vllm serve --help=all`` of every vllm arm (no server needed); the rest is known at a server's start."""
    arms = {}
    for name, arm in spec.arms.items():
        if isinstance(arm, VllmArm):
            data, _ = engine_help(arm.launcher, arm.launch_env())
            if data is not None:
                arms[name] = ArmContract(help=(hashlib.sha256(data).hexdigest(),))
    return Contract(arms)


def check_stored_baseline(spec: RunSpec, path: Path, stored_spec: RunSpec, bundle: BundleReader,
                          ran: Mapping[str, BlockResult], *, live: bool) -> Contract:
    """Refuse a stored bundle that cannot be this run's baseline (EvidenceError saying why); its engine's contract.

    ``live``: this process runs servers, so today's engines are asked now; a
    reader (an xdist worker) runs no server, and leaves that to the process
    that does.
    """
    require_same_spec(stored_spec.spec_id, spec.spec_id)
    if is_diagnostic(bundle.manifest):
        raise EvidenceError(
            f"{path} is a DIAGNOSTIC run ({'; '.join(diagnostic_reasons(bundle.manifest))}): it is not a "
            "campaign result and can never be --baseline-evidence; run the baseline formally", path=str(path))
    if not any(r.block.letter == "A" and r.ok for r in ran.values()):
        raise EvidenceError(f"{path} holds no successful baseline block", path=str(path))
    # Before any server starts: each vllm arm's engine must still accept what it accepted then.
    stored = Contract.of(bundle.lifecycle())
    changed = contract_changes(stored, engines_today(spec) if live else Contract())
    if changed:
        raise EvidenceError(f"{path}: the engine's contract differs from today's ({'; '.join(changed)}): its "
                            "baseline was measured on another engine, so it is refused as --baseline-evidence",
                            path=str(path))
    return stored


def contract_refused(stored: Contract, path: Path | None, result: BlockResult) -> str | None:
    """Why the stored baseline at ``path`` is refused once a server of today recorded another contract; None if not."""
    if result.lifecycle.contract is None:
        return None
    changed = contract_changes(stored, Contract.of_server(result.block.arm, result.lifecycle.contract))
    if not changed:
        return None
    return (f"--baseline-evidence {path} refused: the engine's contract differs from "
            f"today's ({'; '.join(changed)}, seen at {result.block.id}'s start): its baseline was measured on "
            "another engine")
