"""A block that failed inside a series leaves its AB/BA partner out; the blocks after it still pair up as they ran.

A pooled campaign meets it whenever one shard's block failed and the next shard's blocks follow: before, the ratio
paired blocks by position among the blocks that ran, so ``ABBA`` with its third block failed paired ``A`` with ``A``
and the verdict (``h3bench pool``) ended in "blocks 3 and 4 are AA, not an AB or BA pair".
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from h3bench.course.cases import Block
from h3bench.evidence import Bundle
from h3bench.runspec import parse_runspec
from h3bench.verdict.verdicts import VerdictDocument
from tests_unit.bundlesim import FIXTURES, write_bundle

FIXED = parse_runspec(tomllib.loads((FIXTURES / "sim.toml").read_text().replace('design = "sequential"',
                                                                                'design = "fixed"')),
                      source="sim.toml, fixed", spec_dir=FIXTURES)


def _verdict(tmp_path: Path, failed: set[str]) -> VerdictDocument:
    def failure(block: Block) -> dict[str, object]:
        if block.id not in failed:
            return {}
        return {"failure": "request failed: the connection was reset", "failure_kind": "request failed",
                "failure_outcome": "INCONCLUSIVE"}

    # The candidate is 10 % faster in every block, with a little spread between requests.
    path = write_bundle(tmp_path, FIXED, lambda b, i: b.duration * (0.9 if b.letter == "B" else 1.0) * (1 + 0.002 * i),
                        started_at="2026-12-01T00:00:00Z", lifecycle=failure)
    found = VerdictDocument.read(Bundle.open(path))
    assert found is not None
    return found


@pytest.mark.parametrize("failed", ["5s-clean-3B-clean", "5s-clean-4A-baseline"])
def test_a_failed_block_drops_its_pair_and_the_rest_still_pair_up(tmp_path: Path, failed: str) -> None:
    estimate = _verdict(tmp_path, {failed}).candidates["clean"].durations["5s"].estimate
    assert estimate is not None and estimate.k == 3  # pairs 0, 2 and 3 of ABBAABBA; pair 1 lost a block
    assert estimate.geomean == pytest.approx(0.9, rel=1e-6)


def test_with_every_block_run_every_pair_counts(tmp_path: Path) -> None:
    estimate = _verdict(tmp_path, set()).candidates["clean"].durations["5s"].estimate
    assert estimate is not None and estimate.k == 4
