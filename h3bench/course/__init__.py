"""A campaign's course, between the frozen spec and the run: which blocks there are and which of them still run.

:mod:`~h3bench.course.design` derives one :class:`~h3bench.course.design.Design` per spec (its looks, levels
and controls), :mod:`~h3bench.course.cases` and :mod:`~h3bench.course.schedule` list the blocks,
:mod:`~h3bench.course.shards` splits them over hosts, :mod:`~h3bench.course.course` holds the one rule of which
block still runs (live, pooled and simulated) and :mod:`~h3bench.course.looks` each series' look decision.
:mod:`~h3bench.course.designsim` simulates campaigns through that rule, :mod:`~h3bench.course.devicetime` prices
them, :mod:`~h3bench.course.race` and :mod:`~h3bench.course.racesim` lay out, judge, simulate and price a race of
several candidates against shared baseline anchors (not run live yet), :mod:`~h3bench.course.feasibility` says
whether a design can reach its verdict, and
:mod:`~h3bench.course.preflight` checks the pins against what the host runs.
"""
