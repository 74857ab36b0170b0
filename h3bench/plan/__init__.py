"""Before anything runs: whether the design can reach its verdict, what it will cost, and what would stop it.

:mod:`~h3bench.plan.design` simulates the power of a design,
:mod:`~h3bench.plan.estimate` prices a campaign, :mod:`~h3bench.plan.summary` prints its plan, and
:mod:`~h3bench.plan.preflight` checks the pins against what the host runs.
"""
