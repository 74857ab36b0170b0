"""Before anything runs: what a campaign will cost and what would stop it, presented.

:mod:`~h3bench.plan.estimate` prices a campaign, :mod:`~h3bench.plan.summary` prints its plan, and
:mod:`~h3bench.plan.guarantees` states every claimed rate as a simulated scenario. What the plan presents is
computed by the course (:mod:`h3bench.course`).
"""
