"""Honest small-sample statistics for AB/BA campaigns.

:mod:`~h3bench.stats.intervals` is the vectorised arithmetic (bounds,
outcomes, error levels), :mod:`~h3bench.stats.speed` applies it to one
candidate at one duration, and :mod:`~h3bench.stats.warmup` checks whether a
block's warmup was enough.
"""
