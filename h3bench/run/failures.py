"""What ended a block, named: one function from what happened to the block's failure kind and its text.

:func:`classify` takes everything that can end a block badly, in the order
it counts: what the block raised (a failed start, a failed request, an
interrupt, a full disk), then what the exit check found after the stop (a
survivor, a port still taken, a shutdown beyond the shared budget, another
process on the devices), then the output half of the anti-shortcut audit.
:func:`failure_outcome` says what a failure makes of the comparison.
"""

from __future__ import annotations

from h3bench.course.cases import Block
from h3bench.errors import (
    AttentionBackendError,
    CleanupError,
    DiskFullError,
    H3BenchError,
    InterferenceError,
    RequestError,
    ServerStartError,
)
from h3bench.outcome import Outcome
from h3bench.run.records import FailureKind, Sample
from h3bench.server.process import ExitReport
from h3bench.stats.cache_audit import output_problem

__all__ = ["audit_problem", "classify", "failure_outcome", "interrupt_name", "stops_the_campaign"]

_FAILURE_KINDS = {
    InterferenceError: FailureKind.INTERFERENCE,
    ServerStartError: FailureKind.START,
    CleanupError: FailureKind.CLEANUP,
    RequestError: FailureKind.REQUEST,
    AttentionBackendError: FailureKind.ATTENTION,
}
_CLEANUPS = (FailureKind.CLEANUP, FailureKind.SHUTDOWN)


def interrupt_name(exc: BaseException) -> str:
    """``SIGTERM`` for a signal turned into an interrupt, else the exception's type (``KeyboardInterrupt``)."""
    return getattr(exc, "signame", None) or type(exc).__name__


def stops_the_campaign(exc: BaseException) -> bool:
    """Whether ``exc``, once the block is recorded, is raised again: an interrupt, a signal, a full disk.

    Any other :class:`~h3bench.errors.H3BenchError` is the block's own failure, recorded and not raised.
    """
    return isinstance(exc, DiskFullError) or not isinstance(exc, H3BenchError)


def audit_problem(samples: list[Sample]) -> str | None:
    """The output half of the anti-shortcut audit (MLPerf TEST04, adapted); None when the block passes it.

    Every measured request repeats the same seed and inputs, so a server that
    caches outputs would look fast and perfect. The block's audit request uses
    another seed: its output must differ from every measured output. The
    latency half needs the blocks of both arms, and is judged over a series
    (:mod:`h3bench.stats.cache_audit`): one slow audit request is no evidence
    of a cache.
    """
    measured = [s.output_sha256 for s in samples if s.kind == "measured" and s.ok]
    audit = [s for s in samples if s.kind == "audit" and s.ok]
    return output_problem(measured, audit[0].output_sha256) if audit and measured else None


def _raised(exc: BaseException) -> tuple[FailureKind, str]:
    """The failure of what the block raised, with one paragraph that says what happened and the error's context."""
    if isinstance(exc, DiskFullError):  # nothing more can be kept: the server is stopped, the campaign stops
        return FailureKind.INTERRUPTED, f"stopped: {exc}: the block did not finish and is not used"
    if not isinstance(exc, H3BenchError):  # Ctrl-C or a signal: the block is recorded as incomplete
        return FailureKind.INTERRUPTED, f"interrupted by {interrupt_name(exc)}: the block did not finish and is not used"
    kind = next((k for cls, k in _FAILURE_KINDS.items() if isinstance(exc, cls)), FailureKind.ERROR)
    label = kind.value if kind is not FailureKind.ERROR else type(exc).__name__
    text = str(exc) if str(exc).startswith(label) else f"{label}: {exc}"
    tail = getattr(exc, "log_tail", "")
    if tail and tail not in text:
        text += "\nlast log lines:\n" + tail
    return kind, text


def classify(
    raised: BaseException | None,
    exit_report: ExitReport | None,
    *,
    graceful: bool | None,
    shutdown_budget_s: float,
    audit: str | None,
) -> tuple[FailureKind, str] | None:
    """The block's failure kind and text from what happened to it; None when nothing went wrong.

    ``raised``: what the block's start and requests raised; ``exit_report``:
    the exit check after the stop (None when the server never launched);
    ``graceful``: False when the stop needed SIGKILL; ``audit``: the output
    audit's problem (None when it passed or was not run). The first of
    these that went wrong names the failure, except that another process on
    the devices invalidates the block whatever else failed, as it may have
    caused the failure, unless the server itself did not clean up.
    """
    failure = _raised(raised) if raised is not None else None
    if exit_report is not None:
        if failure is None and not exit_report.ok:
            failure = (FailureKind.CLEANUP, f"{FailureKind.CLEANUP}: " + "; ".join(exit_report.problems))
        if failure is None and graceful is False:
            failure = (FailureKind.SHUTDOWN, f"{FailureKind.CLEANUP}: the server did not exit within the shared "
                       f"shutdown budget of {shutdown_budget_s:g} s after SIGTERM and was killed")
        if exit_report.device_interference and (failure is None or failure[0] not in _CLEANUPS):
            earlier = f"\n(the block also failed: {failure[1]})" if failure else ""
            failure = (FailureKind.INTERFERENCE,
                       f"{FailureKind.INTERFERENCE}: " + "; ".join(exit_report.device_interference) + earlier)
    if failure is None and audit:
        failure = (FailureKind.AUDIT, audit)
    return failure


def failure_outcome(block: Block, kind: FailureKind | None) -> Outcome:
    """What a failure of ``block`` makes: a broken baseline or a foreign process invalidates the comparison
    (INCONCLUSIVE); it does not fail the candidate. Recorded for every block, failed or not."""
    invalid = block.letter == "A" or kind in (FailureKind.INTERRUPTED, FailureKind.INTERFERENCE)
    return Outcome.INCONCLUSIVE if invalid else Outcome.FAIL
