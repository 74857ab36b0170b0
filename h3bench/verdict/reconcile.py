"""Do the server's three accounts of one request agree: its profiler, its ``/metrics``, and the client's E2E?

Three clocks see one request. The pipeline profiler times its stages
(``stage_durations``: ``MiniMaxH3Pipeline.encode_prompt``, ``.diffuse``, ...,
vLLM-Omni's ``diffusion/profiler/diffusion_pipeline_profiler.py``); the
engine's ``/metrics`` histograms time the engine call, the DiT loop and the
pipeline (:mod:`h3bench.run.server_metrics`); the client times upload start to
the last byte (:mod:`h3bench.run.client`). They nest, so each difference has a
meaning, and :func:`reconcile` checks each one against a stated tolerance:

==============================  ==========================================  ===============================
check                           holds when                                   a disagreement names
==============================  ==========================================  ===============================
``profiler within E2E``         Σ top-level stages ≤ E2E                     a stage counted twice, or
                                                                             clocks that disagree
``VAE inside decode``           video + audio ``decode_latent`` ≤ decode     decode under-reported
``forward is diffuse``          ``diffusion_forward_s`` = ``diffuse``        one of them misreported
                                                                             (upstream derives one from
                                                                             the other)
``profiler covers the engine``  ``diffusion_exec_s`` − Σ stages ≈ 0          a server whose profiler
                                (else ``inference_time_s``, muxing in it)    misses a stage (or over-
                                                                             reports one)
``client vs server``            E2E − ``e2e_request_latency_s`` ≈ 0          a client that waits on
                                (else ``inference_time_s``)                  something the server does not
                                                                             count (upload, muxing,
                                                                             transfer, a queue)
``DiT steps``                   ``num_inference_steps`` = requested          a server that configured
                                                                             other steps (H3 runs steps − 1
                                                                             DiT forwards)
``one observation``             every family gained ≤ 1 observation, and     another request in the
                                ``diffusion_exec_s`` exactly 1               window, or none observed
==============================  ==========================================  ===============================

"≈" and "≤" allow ``max(absolute_s, relative × reference)``
(:class:`Tolerance`; by default 0.05 s or 1 % of the larger side, E2E for
the client check). What lies legitimately between the accounts is far below
that on H3: reference preprocessing inside exec (0.41 s at 5 s, 0.06 % of
E2E in the 950PR recipe's table), the MP4 muxing and the transfer outside
the server's figures (0.28 s, 0.04 %). A stage smaller than the tolerance is
not detected: at 5 s on the 950PR, 1 % of exec is 7.3 s, enough for a
missing reference encode (8.28 s) but not for a missing text encode
(1.16 s). A check whose sides are missing is reported as not checked, with
why; a server without ``/metrics`` is noted, never failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from h3bench.h3 import top_level_stages
from h3bench.run.phases import RequestPhases
from h3bench.run.server_metrics import (
    DIFFUSION_EXEC_S,
    DIFFUSION_FORWARD_S,
    E2E_REQUEST_LATENCY_S,
    NUM_INFERENCE_STEPS,
    RequestMetrics,
)

__all__ = ["Check", "Reconciliation", "Tolerance", "block_findings", "reconcile", "stage_seconds"]


@dataclass(frozen=True)
class Tolerance:
    """A disagreement counts when it exceeds ``max(absolute_s, relative × reference)``."""

    relative: float = 0.01
    absolute_s: float = 0.05

    def of(self, reference_s: float) -> float:
        return max(self.absolute_s, self.relative * abs(reference_s))

    def describe(self) -> str:
        return f"max({self.absolute_s:g} s, {self.relative:.2%} of the reference)"


@dataclass(frozen=True)
class Check:
    """One comparison: ``ok`` None when a side is missing (``detail`` says which)."""

    name: str
    ok: bool | None
    detail: str  # the numbers compared, or why not checked
    finding: str = ""  # the named disagreement; "" unless ok is False
    difference_s: float | None = None
    tolerance_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Reconciliation:
    """Every check of one request, and the tolerance they used."""

    tolerance: Tolerance
    checks: tuple[Check, ...]

    @property
    def findings(self) -> tuple[str, ...]:
        return tuple(c.finding for c in self.checks if c.ok is False)

    @property
    def ok(self) -> bool:
        """No check disagreed (checks that could not run do not count against it)."""
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "tolerance": {"relative": self.tolerance.relative,
                                             "absolute_s": self.tolerance.absolute_s},
                "findings": list(self.findings), "checks": [c.to_dict() for c in self.checks]}


def stage_seconds(stage_durations: Mapping[str, float]) -> dict[str, float]:
    """Profiler stages by method (``diffuse``, ``video_vae.decode_latent``), summed over classes.

    Only ``"<Class>.<method>"`` keys: upstream also merges its own timings
    into the same dict (``stage_0_gen_ms``, ``queue_wait_ms``; milliseconds,
    ``entrypoints/omni_base.py``), which have no dot and are left out.
    """
    stages: dict[str, float] = {}
    for key, value in stage_durations.items():
        cls, dot, method = key.partition(".")
        if dot and cls and method:
            stages[method] = stages.get(method, 0.0) + float(value)
    return stages


def _top_level(stages: Mapping[str, float]) -> float | None:
    found = [stages[m] for m in top_level_stages(stages) if m in stages]
    return sum(found) if found else None


def _agree(name: str, left: tuple[str, float], right: tuple[str, float], tol: Tolerance, *, reference: float,
           over: str | None, under: str | None, suffix: str = "") -> Check:
    """``left - right`` within the tolerance of ``reference``.

    ``over`` and ``under`` name the finding when ``left`` is too large or too
    small (format fields ``a``, ``b`` and the excess ``d``); None allows that
    direction. ``suffix`` is appended, as it is, to the ``over`` finding.
    """
    (left_name, a), (right_name, b) = left, right
    diff, allowed = a - b, tol.of(reference)
    detail = f"{left_name} {a:.4f} s, {right_name} {b:.4f} s: difference {diff:+.4f} s, tolerance {allowed:.4f} s"
    if over is not None and diff > allowed:
        return Check(name, False, detail, over.format(d=diff, a=a, b=b) + suffix, diff, allowed)
    if under is not None and diff < -allowed:
        return Check(name, False, detail, under.format(d=-diff, a=a, b=b), diff, allowed)
    return Check(name, True, detail, "", diff, allowed)


def _not_checked(name: str, why: str) -> Check:
    return Check(name, None, f"not checked: {why}")


def reconcile(*, e2e_s: float, stage_durations: Mapping[str, float], metrics: RequestMetrics | None,
              requested_steps: int | None, inference_time_s: float | None = None,
              phases: RequestPhases | None = None, tolerance: Tolerance | None = None) -> Reconciliation:
    """Check one request's profiler stages, ``/metrics`` deltas and client E2E against each other.

    Parameters
    ----------
    e2e_s
        The client's E2E, upload start to the last byte.
    stage_durations
        The job's ``stage_durations`` or the ``X-Stage-Durations`` header.
    metrics
        The request's ``/metrics`` delta (:func:`h3bench.run.server_metrics.metrics_delta`); None or
        unavailable: the checks that need it fall back to ``inference_time_s`` or are not checked.
    requested_steps
        The request's ``num_inference_steps``.
    inference_time_s
        The server-reported ``inference_time_s`` (job JSON or ``X-Inference-Time-S``).
    phases
        The client's upload and download (:mod:`h3bench.run.phases`), quoted in the client check.
    tolerance
        Default :class:`Tolerance`.
    """
    tol = tolerance or Tolerance()
    stages = stage_seconds(stage_durations)
    top = _top_level(stages)
    live = metrics if metrics is not None and metrics.available else None
    checks: list[Check] = []

    if top is None:
        checks.append(_not_checked("profiler within E2E", "the server reported no profiler stages"))
    else:
        checks.append(_agree(
            "profiler within E2E", ("profiler stages", top), ("E2E", e2e_s), tol, reference=e2e_s,
            over="the profiler's stages sum to {a:.4f} s, {d:.4f} s more than the client's E2E {b:.4f} s: a stage "
                 "counted twice, or clocks that disagree", under=None))

    nested = [stages[m] for m in ("video_vae.decode_latent", "audio_vae.decode_latent") if m in stages]
    if "decode" in stages and nested:
        checks.append(_agree(
            "VAE inside decode", ("VAE decode_latent calls", sum(nested)), ("decode", stages["decode"]), tol,
            reference=stages["decode"], under=None,
            over="the profiler's decode ({b:.4f} s) is {d:.4f} s shorter than the VAE decodes inside it ({a:.4f} s): "
                 "decode is under-reported"))
    else:
        checks.append(_not_checked("VAE inside decode", "no decode with its decode_latent calls"))

    forward = live.seconds(DIFFUSION_FORWARD_S) if live else None
    if forward is not None and "diffuse" in stages:
        checks.append(_agree(
            "forward is diffuse", (DIFFUSION_FORWARD_S, forward), ("profiler diffuse", stages["diffuse"]), tol,
            reference=max(forward, stages["diffuse"]),
            over="/metrics " + DIFFUSION_FORWARD_S + " ({a:.4f} s) exceeds the profiler's diffuse ({b:.4f} s) by "
                 "{d:.4f} s: upstream derives one from the other, so one of them is misreported",
            under="/metrics " + DIFFUSION_FORWARD_S + " ({a:.4f} s) falls {d:.4f} s short of the profiler's diffuse "
                  "({b:.4f} s): upstream derives one from the other, so one of them is misreported"))
    else:
        checks.append(_not_checked("forward is diffuse", "needs /metrics " + DIFFUSION_FORWARD_S
                                   + " and the profiler's diffuse"))

    exec_s = live.seconds(DIFFUSION_EXEC_S) if live else None
    engine = (DIFFUSION_EXEC_S, exec_s) if exec_s is not None else ("inference_time_s", inference_time_s)
    if top is None or engine[1] is None:
        checks.append(_not_checked("profiler covers the engine", "needs the profiler's stages and /metrics "
                                   + DIFFUSION_EXEC_S + " or the server's inference_time_s"))
    else:
        name, value = engine[0], float(engine[1])
        checks.append(_agree(
            "profiler covers the engine", (name, value), ("profiler stages", top), tol, reference=value,
            over="the server's profiler misses {d:.4f} s of its own " + name + " ({a:.4f} s against {b:.4f} s in "
                 "its stages): a stage without a profiler key, or one it under-reports",
            under="the profiler's stages ({b:.4f} s) exceed the server's " + name + " ({a:.4f} s) by {d:.4f} s: a "
                  "stage over-reported, or " + name + " under-reported"))

    served = live.seconds(E2E_REQUEST_LATENCY_S) if live else None
    server = (E2E_REQUEST_LATENCY_S, served) if served is not None else ("inference_time_s", inference_time_s)
    if server[1] is None:
        checks.append(_not_checked("client vs server", "needs /metrics " + E2E_REQUEST_LATENCY_S
                                   + " or the server's inference_time_s"))
    else:
        name, value = server[0], float(server[1])
        parts = ""
        if phases is not None and phases.upload_s is not None and phases.download_s is not None:
            rest = e2e_s - value - phases.upload_s - phases.download_s
            parts = (f" (upload {phases.upload_s:.4f} s, download {phases.download_s:.4f} s, the rest {rest:.4f} s in "
                     f"muxing, transfer or a queue outside the engine)")
        checks.append(_agree(
            "client vs server", ("E2E", e2e_s), (name, value), tol, reference=e2e_s,
            over="the client waited {d:.4f} s that the server does not count (E2E {a:.4f} s, server " + name
                 + " {b:.4f} s)", suffix=parts,
            under="the server counts {d:.4f} s more than the client waited (E2E {a:.4f} s, server " + name
                  + " {b:.4f} s): clocks that disagree, or a figure of another request"))

    steps = live.histograms.get(NUM_INFERENCE_STEPS) if live else None
    if requested_steps is None or steps is None:
        checks.append(_not_checked("DiT steps", "needs the requested steps and /metrics " + NUM_INFERENCE_STEPS))
    elif steps.count != 1 or steps.sum != requested_steps:
        configured = f"{steps.sum:g} steps" if steps.count == 1 else f"{steps.count:g} observations (sum {steps.sum:g})"
        checks.append(Check("DiT steps", False, f"requested {requested_steps}, {NUM_INFERENCE_STEPS}: {configured}",
                            f"the server configured {configured} for a request of {requested_steps} steps "
                            f"({requested_steps - 1} DiT forwards on H3)"))
    else:
        checks.append(Check("DiT steps", True, f"requested {requested_steps}, configured {steps.sum:g} "
                                               f"({requested_steps - 1} DiT forwards on H3)"))

    if live is None:
        why = metrics.reason if metrics is not None else "no scrape"
        checks.append(_not_checked("one observation", f"/metrics not available: {why}"))
    else:
        several = {n: d.count for n, d in live.histograms.items() if d.count > 1}
        exec_count = live.observations(DIFFUSION_EXEC_S)
        problems = [f"{n} gained {c:g} observations during one request: another request ran on the server in the "
                    f"window" for n, c in sorted(several.items())]
        if exec_count is not None and exec_count == 0:
            problems.append(f"the server observed no {DIFFUSION_EXEC_S} for this request (log stats off, or the "
                            f"request never reached the engine)")
        detail = (f"{DIFFUSION_EXEC_S}: {exec_count:g} observation(s)" if exec_count is not None
                  else f"the server does not export {DIFFUSION_EXEC_S}")
        checks.append(Check("one observation", not problems, detail, "; ".join(problems)))
    return Reconciliation(tol, tuple(checks))


def block_findings(reconciliations: Sequence[Reconciliation]) -> tuple[str, ...]:
    """A block's record of its requests' disagreements: one line per check that disagreed, with how often."""
    lines = []
    n = len(reconciliations)
    names = dict.fromkeys(c.name for r in reconciliations for c in r.checks if c.ok is False)
    for name in names:
        failed = [c for r in reconciliations for c in r.checks if c.name == name and c.ok is False]
        lines.append(f"{name}: in {len(failed)} of {n} request(s), e.g. {failed[0].finding}")
    return tuple(lines)
