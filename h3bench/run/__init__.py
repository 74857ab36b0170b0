"""Running: one block at a time, and the course of the campaign.

:mod:`~h3bench.run.client` sends one Ref2VA request and times it,
:mod:`~h3bench.run.block` runs one fresh server process through its warmup,
measured and audit requests: :mod:`~h3bench.run.launch` builds and starts its
server, :mod:`~h3bench.run.script` says which requests it sends,
:mod:`~h3bench.run.recorder` sends them and records each one's evidence, and
:mod:`~h3bench.run.failures` names what ended it. :mod:`~h3bench.run.records`
holds what each request and block produced, :mod:`~h3bench.run.measure` times the measured
requests, :mod:`~h3bench.run.pace` and :mod:`~h3bench.run.progress` show how
far the campaign has come, :mod:`~h3bench.run.profiling` profiles a marked
request, :mod:`~h3bench.run.heldout` runs the held-out phase and
:mod:`~h3bench.run.resume` continues an interrupted bundle.
"""
