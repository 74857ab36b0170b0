"""Evidence bundles: one append-only directory per campaign run, and the check that it is intact.

:mod:`~h3bench.evidence.layout` names what a bundle holds,
:mod:`~h3bench.evidence.manifest` types its ``manifest.json``,
:mod:`~h3bench.evidence.reader` reads one (:class:`BundleReader`, all that a
reader of another run's bundle gets), :mod:`~h3bench.evidence.bundle` writes
one (:class:`Bundle`, the campaign's), :mod:`~h3bench.evidence.lock` keeps it
to one writer, :mod:`~h3bench.evidence.seal` says what its ``final.json``
lists, :mod:`~h3bench.evidence.verify` re-hashes one, and
:mod:`~h3bench.evidence.files` makes every write atomic.
"""

from __future__ import annotations

from h3bench.evidence.bundle import Bundle
from h3bench.evidence.layout import DEFAULT_ROOT, FORMAT, LIFECYCLE, SAMPLE_KINDS, SAMPLES, SERVERS
from h3bench.evidence.reader import BundleReader
from h3bench.evidence.verify import VerifyReport, require_verified, verify

__all__ = [
    "DEFAULT_ROOT",
    "FORMAT",
    "LIFECYCLE",
    "SAMPLES",
    "SAMPLE_KINDS",
    "SERVERS",
    "Bundle",
    "BundleReader",
    "VerifyReport",
    "require_verified",
    "verify",
]
