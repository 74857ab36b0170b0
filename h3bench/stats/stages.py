"""The stage times of an arm's requests: medians of the profiler's top-level stages and of the derived remainder.

The keys are the pipeline profiler's ``"<Class>.<method>"`` (for H3,
``MiniMaxH3Pipeline.diffuse`` and the others of :func:`h3bench.h3.top_level_stages`);
MP4 muxing happens in the API layer and has no key, so E2E minus the sum of
the top-level stages is reported as ``mux+transfer (derived)``. E2E is
measured around the stages, so a negative remainder means the samples are
inconsistent: it is counted as a data error, never given as a median.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

from h3bench.h3 import mux_and_transfer_s, top_level_method, top_level_stages

__all__ = ["DERIVED_STAGE", "stage_median_values"]

DERIVED_STAGE = "mux+transfer (derived)"


def stage_median_values(requests: Iterable[tuple[float | None, Mapping[str, float]]]) -> tuple[dict[str, float], int]:
    """Per ``(E2E seconds, stage durations)`` of each request: the median of each stage, and the negative remainders.

    Returns the medians by stage name (the derived remainder last, when no
    request has a negative one) and how many requests have a negative one.
    """
    requests = list(requests)
    medians: dict[str, float] = {}
    reported = {method for _, stages in requests for k in stages if (method := top_level_method(k)) is not None}
    for stage in top_level_stages(reported):
        values = [v for _, stages in requests for k, v in stages.items() if top_level_method(k) == stage]
        if values:
            medians[stage] = statistics.median(values)
    rest = [r for e2e, stages in requests if e2e is not None if (r := mux_and_transfer_s(e2e, stages)) is not None]
    negative = sum(1 for r in rest if r < 0)
    if rest and not negative:
        medians[DERIVED_STAGE] = statistics.median(rest)
    return medians, negative
