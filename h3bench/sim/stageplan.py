"""What every worker runs of one request: the wall seconds of each stage, decided once by the API process.

Apart from :mod:`h3bench.sim.profile` (the pydantic model it comes from) so
that a spawned worker imports no pydantic: each of a server's workers starts
a fresh interpreter, and the profile's model classes cost more CPU to build
than a short request's rendering.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StagePlan"]


@dataclass(frozen=True)
class StagePlan:
    """Wall seconds for each stage of one request, decided by the API process and run by every worker."""

    preprocess_s: float
    encode_prompt_s: float
    encode_media_s: float
    step_s: tuple[float, ...]  # one per DiT forward
    video_decode_s: float
    audio_decode_s: float
    post_decode_s: float
    mux_s: float
    peak_memory_mb: float
    handoff_s: float = 0.0  # the output from the worker to the API server, after post-processing (no profiler key)

    @property
    def total_s(self) -> float:
        return (
            self.preprocess_s
            + self.encode_prompt_s
            + self.encode_media_s
            + sum(self.step_s)
            + self.video_decode_s
            + self.audio_decode_s
            + self.post_decode_s
            + self.handoff_s
            + self.mux_s
        )
