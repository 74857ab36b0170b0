"""``python -m h3bench.conformance``: the conformance step (see :mod:`h3bench.conformance.run`)."""

from __future__ import annotations

if __name__ == "__main__":
    from h3bench.conformance.run import main

    raise SystemExit(main())
