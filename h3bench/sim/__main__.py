"""``python -m h3bench.sim``: the simulator server (see :func:`h3bench.sim.main`)."""

from __future__ import annotations

# Inside the guard: spawned workers import this module as __mp_main__ and must not serve.
if __name__ == "__main__":
    from h3bench.sim import main

    raise SystemExit(main())
