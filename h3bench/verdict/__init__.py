"""The verdict: outputs judged through every gate, and the outcome per candidate and duration.

:mod:`~h3bench.verdict.judge` compares outputs (matched pairs, the lossless
test), :mod:`~h3bench.verdict.verdicts` combines speed, quality and lossless
into one outcome, and :mod:`~h3bench.verdict.acceptance` decides the
research campaign's acceptance.
"""
