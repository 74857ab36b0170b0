"""The host: its NPUs, what it runs, and what a run records about it.

:mod:`~h3bench.host.npusmi` parses ``npu-smi info``, :mod:`~h3bench.host.devices`
checks and locks the campaign's devices, :mod:`~h3bench.host.telemetry`
samples them during a block, :mod:`~h3bench.host.inventory` records the
engine, CANN and driver, :mod:`~h3bench.host.checkpoint` the checkpoint's
content identity, and :mod:`~h3bench.host.environment` the interpreter.
"""
