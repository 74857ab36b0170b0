"""The request recorder: sends a block's requests and writes each one's evidence as it happens.

A :class:`Recorder` serves one block. Its timed part (:meth:`Recorder.send`)
is the request alone, its MP4 streamed to scratch; its untimed part
(:meth:`Recorder.flush`) stores the output in the bundle, takes the
``/metrics`` scrape that closes the request's delta and appends the sample to
``samples.jsonl``. A failed request is recorded too, before its error goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from h3bench.course.cases import Block
from h3bench.errors import H3BenchError
from h3bench.evidence import Bundle
from h3bench.run.client import GenerationRequest, GenerationResult, Reference, VideoClient
from h3bench.run.pace import Pace
from h3bench.run.profiling import PROFILE, profiled_request
from h3bench.run.records import Sample
from h3bench.run.server_metrics import Scrape, metrics_delta, scrape
from h3bench.runspec import RunSpec

__all__ = ["Recorder"]


class Recorder:
    """Sends a block's requests and writes each one's evidence outside the timed part.

    ``phase`` marks every sample it records (``formal``, or ``heldout`` for the
    held-out phase); a profiled request is marked ``profile``.
    """

    def __init__(
        self, spec: RunSpec, block: Block, bundle: Bundle, inputs: Mapping[str, Path], scratch: Path, pace: Pace,
        phase: str = "formal",
    ) -> None:
        self.spec = spec
        self.block = block
        self.bundle = bundle
        self.scratch = scratch
        self.pace = pace
        self.references = tuple(Reference.from_path(p) for p in inputs.values())
        self.phase = phase
        self.samples: list[Sample] = []
        self._pending: tuple[str, int, int, GenerationResult] | None = None
        self._held: list[Sample] | None = None  # the profiled request's sample waits for its traces
        self._base_url: str | None = None  # set by ready(): the server whose /metrics is scraped
        self._scrapes = 0
        self._last: tuple[Scrape, str | None] | None = None  # the latest scrape and its file in the bundle

    def ready(self, base_url: str) -> None:
        """Right after the server is ready: its first ``/metrics`` scrape, the start of the first request's delta."""
        self._base_url = base_url
        self._last = self._scrape()

    def _scrape(self) -> tuple[Scrape, str | None]:
        """One scrape, its raw text stored as ``metrics/<block>/<NN>.prom`` (nothing stored for a server without it)."""
        assert self._base_url is not None
        taken = scrape(self._base_url)
        relpath = self.bundle.store_scrape(self.block.id, self._scrapes, taken.text) if taken.text else None
        self._scrapes += 1
        return taken, relpath

    def _metrics(self) -> tuple[dict[str, Any] | None, dict[str, str | None] | None]:
        """The untimed scrape after a request: what ``/metrics`` gained over it, and the two scrapes' files."""
        if self._last is None:
            return None, None
        before, after = self._last, self._scrape()
        self._last = after
        return metrics_delta(before[0], after[0]).to_dict(), {"before": before[1], "after": after[1]}

    def _request(self, seed: int, references: tuple[Reference, ...] | None = None, steps: int | None = None
                 ) -> GenerationRequest:
        w = self.spec.workload
        return GenerationRequest(
            prompt=self.spec.inputs.prompt,
            duration_s=self.block.duration,
            size=w.size,
            fps=w.fps,
            seed=seed,
            num_inference_steps=steps or w.steps,
            flow_shift=w.flow_shift,
            audio_flow_shift=w.audio_flow_shift,
            references=references or self.references,
        )

    def send(
        self, client: VideoClient, kind: str, index: int, seed: int, references: tuple[Reference, ...] | None = None,
        steps: int | None = None,
    ) -> None:
        """The timed part: one request (``references``: other inputs than the spec's; ``steps``: other inference
        steps than the workload's), its MP4 streamed to scratch."""
        output = self.scratch / f"{self.block.id}-{kind}{index}.mp4"
        request = self._request(seed, references, steps)
        try:
            with self.pace.step(self.block, kind, index) as step:
                if self.spec.protocol.request_api == "async":
                    def polled(job: dict[str, Any]) -> None:
                        step.server_percent = job.get("progress")

                    result = client.generate_async(request, output, on_poll=polled)
                else:
                    result = client.generate_sync(request, output)
        except H3BenchError as exc:
            server_metrics, scrapes = self._metrics()  # what the server counted of the failed request
            self._record(Sample(self.block.id, kind, index, seed, ok=False, error=str(exc), phase=self._phase(kind),
                                server_metrics=server_metrics, scrapes=scrapes))
            raise
        self._pending = (kind, index, seed, result)

    def flush(self, *_: Any) -> None:
        """The untimed part: store the output and append the sample."""
        if self._pending is None:
            return
        kind, index, seed, result = self._pending
        self._pending = None
        sha = self.bundle.store_output(result.output_path, move=True)[0]
        server_metrics, scrapes = self._metrics()
        self._record(Sample(
            self.block.id, kind, index, seed, ok=True,
            e2e_s=result.e2e_s,
            request_id=result.request_id,
            inference_time_s=result.inference_time_s,
            stage_durations=dict(result.stage_durations),
            peak_memory_mb=result.peak_memory_mb,
            output_sha256=sha,
            phase=self._phase(kind),
            server_metrics=server_metrics,
            scrapes=scrapes,
            phases=result.phases.to_dict() if result.phases is not None else None,
        ))

    def request(
        self, client: VideoClient, kind: str, index: int, seed: int, references: tuple[Reference, ...] | None = None,
        steps: int | None = None,
    ) -> None:
        self.send(client, kind, index, seed, references, steps)
        self.flush()

    def profiled(self, client: VideoClient, directory: Path) -> None:
        """One more request, between /start_profile and /stop_profile, recorded as ``profile`` with its traces."""
        held: list[Sample] = []
        info: dict[str, Any] = {"profiler": {"supported": None, "note": "the profiled request failed"}, "traces": []}
        self._held = held
        try:
            info = profiled_request(client, lambda: self.request(client, PROFILE, 0, self.spec.workload.seed),
                                    bundle=self.bundle, directory=directory, block=self.block)
        finally:
            self._held = None
            if not held:  # not sent: the server does not profile
                held.append(Sample(self.block.id, PROFILE, 0, self.spec.workload.seed, ok=False,
                                   error=info["profiler"]["note"], phase=PROFILE))
            for sample in held:
                self._record(sample, info)

    def _phase(self, kind: str) -> str:
        return PROFILE if kind == PROFILE else self.phase

    def _record(self, sample: Sample, extra: Mapping[str, Any] | None = None) -> None:
        if self._held is not None and sample.kind == PROFILE:
            self._held.append(sample)
            return
        self.samples.append(sample)
        block = self.block
        self.bundle.append_sample({
            **sample.to_dict(),
            **(extra or {}),
            "warmup": sample.kind == "warmup",
            "arm": block.arm,
            "candidate": block.candidate,
            "duration": block.duration,
            "position": block.position,
        })
