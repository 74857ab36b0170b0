"""One server process: launch, readiness, graceful stop, and proof that every process of it exited.

:mod:`~h3bench.server.process` is the lifecycle, :mod:`~h3bench.server.record` what it
leaves as evidence (the server's record, the exit check), :mod:`~h3bench.server.proctree`
finds and stops the process tree, :mod:`~h3bench.server.ports` picks and
checks ports, and :mod:`~h3bench.server.log` reads what the log says.
"""
