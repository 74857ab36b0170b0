"""``python -m conformance``: the conformance step (see :mod:`conformance.run`)."""

from __future__ import annotations

if __name__ == "__main__":
    from conformance.run import main

    raise SystemExit(main())
