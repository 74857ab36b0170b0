"""The client's side of one request's E2E: upload, waiting for the server, download, and the job's queueing.

E2E runs from the start of the upload to the last byte of the MP4
(:mod:`h3bench.run.client`). Its client-side parts are read from httpcore's
trace events (httpx's ``"trace"`` request extension), on the same
``time.perf_counter`` clock as E2E:

- ``upload_s``: from the start of the request to ``send_request_body``
  complete (the connection, the headers and the multipart body with the
  references), of ``POST /v1/videos/sync`` or ``POST /v1/videos``;
- ``download_s``: from ``receive_response_headers`` complete of the answer
  that carries the MP4 (the sync answer, or ``GET /v1/videos/{id}/content``)
  to the last byte written;
- ``server_wait_s``: the rest of E2E, which the server spends and the client
  waits through: on the sync path the whole generation and the muxing; on the
  async path also the POST's answer, the polls and the content request's
  headers.

The queueing of an async job comes from the job's own timestamps
(``VideoResponse`` in vLLM-Omni's ``entrypoints/openai/protocol/videos.py``):
``created_at`` and ``completed_at`` are whole Unix seconds, and
``inference_time_s`` runs from the start of the job's task
(``video/generation/helpers.py``), so ``queue_s = completed_at - created_at -
inference_time_s`` is the time the job waited before its task ran, known to
within one second (``queue_resolution_s``); it can come out negative by
that much. The sync path has no job and no queue figure.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["QUEUE_RESOLUTION_S", "PhaseClock", "RequestPhases", "job_queue_s"]

QUEUE_RESOLUTION_S = 1.0  # two timestamps truncated to whole seconds
_BODY_SENT = "http11.send_request_body.complete"
_HEADERS_RECEIVED = "http11.receive_response_headers.complete"


@dataclass(frozen=True)
class RequestPhases:
    """One request's E2E split on the client's clock; None where the client could not see the boundary."""

    upload_s: float | None
    server_wait_s: float | None
    download_s: float | None
    queue_s: float | None = None  # async only: from the job's timestamps
    queue_resolution_s: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> RequestPhases:
        return cls(**{key: record.get(key) for key in cls.__dataclass_fields__})


class PhaseClock:
    """Collects the trace events of a request's HTTP exchanges on ``time.perf_counter``.

    Pass ``clock.trace("upload")`` as the ``"trace"`` extension of the
    request that uploads, and ``clock.trace("download")`` of the one whose
    body is the MP4 (on the sync path, one request is both).
    """

    def __init__(self, start: float) -> None:
        self.start = start
        self.events: dict[tuple[str, str], float] = {}

    def trace(self, leg: str) -> Any:
        def record(name: str, _info: Mapping[str, Any]) -> None:
            self.events.setdefault((leg, name), time.perf_counter())

        return record

    def phases(self, end: float, *, upload: str = "upload", download: str = "download",
               queue: tuple[float | None, float | None] = (None, None)) -> RequestPhases:
        """The split of ``end - start`` (E2E) by the events seen; ``queue`` from :func:`job_queue_s`."""
        sent = self.events.get((upload, _BODY_SENT))
        headers = self.events.get((download, _HEADERS_RECEIVED))
        upload_s = sent - self.start if sent is not None else None
        download_s = end - headers if headers is not None else None
        wait = None
        if sent is not None and headers is not None:
            wait = headers - sent
        return RequestPhases(upload_s, wait, download_s, *queue)


def job_queue_s(job: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """``completed_at - created_at - inference_time_s`` of a completed job, and its resolution (1 s).

    (None, None) when the job lacks one of them.
    """
    try:
        created, completed, inference = (float(job[k]) for k in ("created_at", "completed_at", "inference_time_s"))
    except (KeyError, TypeError, ValueError):
        return None, None
    return completed - created - inference, QUEUE_RESOLUTION_S
