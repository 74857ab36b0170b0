"""What would stop a campaign before launch, as ``h3bench plan`` lists it (:func:`h3bench.plan.estimate.make_plan`)."""

from __future__ import annotations

from pathlib import Path

from h3bench.course.feasibility import design_problems, design_warnings
from h3bench.errors import H3BenchError
from h3bench.evidence import files
from h3bench.host.devices import DeviceLock
from h3bench.runspec import UNPINNED, RunSpec

__all__ = ["launch_problems"]


def launch_problems(spec: RunSpec, lpips_dir: Path | None, lock_path: Path | None,
                    evidence: tuple[Path, float] | None = None) -> list[str]:
    """Unpinned fields, an evidence directory that cannot hold the bundle (``evidence``: where, and the bytes),
    inputs that fail their pins, missing LPIPS weights, a held device lock, busy or missing NPUs, the design's
    problems and warnings."""
    problems = [f"{path} is {UNPINNED}: a formal campaign needs it pinned" for path in spec.unpinned]
    if evidence is not None:  # what the campaign itself refuses before any server starts
        try:
            files.require_writable(*evidence)
        except H3BenchError as exc:
            problems.append(str(exc))
    try:
        spec.verify_inputs()
    except H3BenchError as exc:
        problems.append(str(exc))
    if spec.gates.lpips_required:
        try:
            from h3bench.metrics.lpips_weights import authenticate_weights

            authenticate_weights(lpips_dir)
        except H3BenchError as exc:
            problems.append(f"LPIPS weights: {exc}")
    if spec.hardware.kind != "sim":
        holder = DeviceLock(lock_path).holder() if lock_path is not None else None
        if holder is not None:
            problems.append(f"the device lock {lock_path} is held by {holder}: another campaign is running on this "
                            "host")
        problems += _device_problems(spec)
    return problems + design_problems(spec, lossless_on=spec.gates.lossless) + design_warnings(spec)


def _device_problems(spec: RunSpec) -> list[str]:
    from h3bench.host.devices import NpuSmiCheck

    try:
        NpuSmiCheck(spec.hardware.device_ids).before_start()
    except H3BenchError as exc:
        return [f"devices: {exc}"]
    return []
