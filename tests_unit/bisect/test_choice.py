"""Which commit to probe: information per device-second, one per host, never a skipped one or the bad endpoint."""

from __future__ import annotations

import numpy as np
import pytest

from h3bench.bisect.choice import ProbeCosts, binary_entropy, choose, information
from h3bench.bisect.search import eligible


def test_with_a_flat_posterior_and_equal_costs_it_bisects():
    probs = np.full(32, 1 / 32)
    assert choose(probs, eligible(np.zeros(32, bool)), np.ones(32), 0.05)[0] == 15
    assert information(probs, 0.0)[15] == pytest.approx(1.0)


def test_a_known_answer_is_worth_nothing():
    probs = np.zeros(8)
    probs[5] = 1.0
    assert np.allclose(information(probs, 0.05), 0.0)
    assert choose(probs, np.ones(8, bool), np.ones(8), 0.05)[0] == -1


def test_an_image_already_on_the_host_tips_the_choice():
    probs = np.full(8, 1 / 8)
    costs = ProbeCosts(3600.0, np.full(8, 3600.0), np.where(np.arange(8) == 4, 0.0, 3600.0))
    seconds = costs.probe_s(np.asarray(1.0))
    assert choose(probs, eligible(np.zeros(8, bool)), seconds, 0.05)[0] == 4
    assert choose(probs, eligible(np.zeros(8, bool)), np.full(8, 7200.0), 0.05)[0] == 3


def test_skipped_commits_and_the_bad_endpoint_are_never_chosen():
    probs = np.full(8, 1 / 8)
    skipped = np.zeros(8, bool)
    skipped[3] = True
    picks = choose(probs, eligible(skipped), np.ones(8), 0.05, hosts=7).tolist()
    assert 3 not in picks and 7 not in picks


def test_several_hosts_get_distinct_probes_that_split_the_posterior():
    probs = np.full(32, 1 / 32)
    picks = choose(probs, eligible(np.zeros(32, bool)), np.ones(32), 0.0, hosts=3)
    assert len(set(picks.tolist())) == 3
    cells = np.diff(np.concatenate([[-1], np.sort(picks), [31]]))
    assert cells.max() <= 10  # four cells of about eight
    # Batched rows choose as single rows do.
    batch = choose(np.stack([probs, np.roll(probs, 0)]), eligible(np.zeros((2, 32), bool)), np.ones((2, 32)), 0.0, 3)
    assert (batch[0] == picks).all() and (batch[1] == picks).all()


def test_binary_entropy_at_its_ends_and_middle():
    assert binary_entropy(np.array([0.0, 0.5, 1.0])).tolist() == pytest.approx([0.0, 1.0, 0.0])
