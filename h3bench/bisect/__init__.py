"""From a regression to its culprit engine commit: a search over a spec's ``[bisect]`` range, with an error rate.

- :mod:`~h3bench.bisect.posterior`: the posterior over the culprit from every pair measured (the step
  and the spread integrated out), and the groups a commit that does not start ties together;
- :mod:`~h3bench.bisect.probe`: one probe's likelihood ratio and its sequential test (Wald's SPRT);
- :mod:`~h3bench.bisect.choice`: the next probe by expected information per device-hour, one per host;
- :mod:`~h3bench.bisect.search`: when the search stops, what it names, and its live state;
- :mod:`~h3bench.bisect.segments`: every change: the segments of the range a claim leaves, searched in turn;
- :mod:`~h3bench.bisect.specs`: the verify, probe and confirm campaigns derived from the bisect spec;
- :mod:`~h3bench.bisect.log`: the hash-chained bisection log;
- :mod:`~h3bench.bisect.runner`: the live search; :mod:`~h3bench.bisect.campaigns` runs each campaign by the
  project's campaign machinery, :mod:`~h3bench.bisect.observe` reads what its sealed bundle showed, and
  :mod:`~h3bench.bisect.summary` prints the log;
- :mod:`~h3bench.bisect.simulate`: whole searches simulated through the same code (error rates, cost);
- :mod:`~h3bench.bisect.plan` and :mod:`~h3bench.bisect.report`: what it will cost, and what it did.

The ``[bisect]`` table is :mod:`h3bench.runspec.bisection`; ``h3bench bisect`` is :mod:`h3bench.cli.bisect`.
docs/bisect.md says how to run it and what was measured.
"""
