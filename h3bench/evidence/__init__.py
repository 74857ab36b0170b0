"""Evidence bundles: one append-only directory per campaign run, and the check that it is intact.

:mod:`~h3bench.evidence.bundle` writes and reads a bundle,
:mod:`~h3bench.evidence.verify` re-hashes one, and
:mod:`~h3bench.evidence.files` makes every write atomic.
"""

from __future__ import annotations

from h3bench.evidence.bundle import DEFAULT_ROOT, FORMAT, LIFECYCLE, SAMPLE_KINDS, SAMPLES, SERVERS, Bundle
from h3bench.evidence.verify import VerifyReport, require_verified, verify

__all__ = [
    "DEFAULT_ROOT",
    "FORMAT",
    "LIFECYCLE",
    "SAMPLES",
    "SAMPLE_KINDS",
    "SERVERS",
    "Bundle",
    "VerifyReport",
    "require_verified",
    "verify",
]
