"""E2E latency of each AB/BA block.

Per duration, blocks run in the RunSpec's AB/BA order: the fixed design's
(ABBAABBA by default), or the sequential design's pairs, which stop when the
answer is clear (a block that a look made unnecessary is skipped, with the
reason). Each block is a fresh server process: it starts, takes its warmup
request(s), then k measured requests timed by pytest-benchmark (upload start
to the last byte of the MP4), then one audit request with another seed, then
it is stopped and every worker is proven gone. Startup, warmup and measured
times stay apart.
"""

from __future__ import annotations

import pytest

from h3bench.plugin import timed_by

pytestmark = pytest.mark.perf


def test_block_latency(campaign, block, benchmark):
    result = campaign.run_block(block, timed_by(benchmark))

    protocol = campaign.spec.protocol
    counted = len(result.measured) + int(protocol.audit and protocol.audit_counts)
    assert counted >= 3, "a block's median needs at least three counted requests (measured, and a counted audit)"
    assert all(s.e2e_s > 0 for s in result.measured)
    assert result.lifecycle.startup_s is not None, "startup was not recorded apart from E2E"
