"""The session: a live campaign (its runner) and its results, for a live run and a stored bundle alike.

:mod:`~h3bench.session.settings` resolves the options once,
:mod:`~h3bench.session.runner` runs the selected blocks and seals the bundle,
:mod:`~h3bench.session.results` reads what ran and judges it, and
:mod:`~h3bench.session.stored` reads a sealed bundle across campaigns.
"""
