"""Request scripts: which requests a block sends to its server, in which order.

A :data:`Script` gets the block's recorder, a client of its server, the
server itself and the measure that times the measured requests. The formal
script (:func:`formal`) is every block's unless :func:`~h3bench.run.block.run_block`
is given another one (the held-out phase's, :mod:`h3bench.run.heldout`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from h3bench.run.client import VideoClient
from h3bench.run.measure import Measure
from h3bench.run.recorder import Recorder
from h3bench.server.process import ServerProcess

__all__ = ["Script", "formal", "warmups"]

Script = Callable[[Recorder, VideoClient, ServerProcess, Measure], None]


def warmups(recorder: Recorder, client: VideoClient, server: ServerProcess) -> None:
    """The block's warmup requests (at the workload's seed and shape), timed as the server's warmup.

    With ``protocol.warmup_steps`` they run that many inference steps, a cheap warmup; the server's
    record keeps the steps its warmup ran.
    """
    steps = recorder.spec.protocol.warmup_steps or recorder.spec.workload.steps
    t0 = time.perf_counter()
    for i in range(recorder.spec.protocol.warmups_per_block):
        recorder.request(client, "warmup", i, recorder.spec.workload.seed, steps=steps)
    server.record_warmup(time.perf_counter() - t0, steps)
    server.snapshot()


def formal(recorder: Recorder, client: VideoClient, server: ServerProcess, measure: Measure) -> None:
    """Warmups, the measured requests (timed by ``measure``), then the audit request."""
    protocol, seed = recorder.spec.protocol, recorder.spec.workload.seed
    warmups(recorder, client, server)
    counter = iter(range(protocol.requests_per_block))
    measure.time(lambda: recorder.send(client, "measured", next(counter), seed), recorder.flush,
                 protocol.requests_per_block)
    server.snapshot()
    if protocol.audit:
        recorder.request(client, "audit", 0, protocol.audit_seed)
    server.snapshot()
