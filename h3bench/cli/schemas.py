"""The JSON Schemas h3bench ships (``h3bench/data/schemas/``): ``verdict.json``, a ledger line, an export and
``manifest.json``.

Each is derived from the typed record that writes it (:func:`h3bench.evidence.schema.schema_of`), so
the files cannot drift from the code: the tests compare them with the derivation and validate real
bundles, ledgers and exports against them. ``python -m h3bench.cli.schemas`` writes them again after a
record changes.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from h3bench.evidence.manifest import Manifest
from h3bench.evidence.schema import schema_of
from h3bench.ledger.entries import LedgerEntry
from h3bench.outcome import Outcome
from h3bench.report.export import Export
from h3bench.verdict.stage_effects import PartEffect
from h3bench.verdict.verdicts import DIAGNOSTIC_VERDICT, CandidateVerdict, DurationVerdict, VerdictDocument

__all__ = ["SCHEMAS", "derived", "shipped"]

_BASE = "https://h3bench.invalid/schemas/"  # an identifier, not a place to fetch from
_OUTCOME = {"enum": [str(o) for o in Outcome]}
_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}


def _verdict() -> dict[str, Any]:
    # verdict.json carries the combined outcomes beside the fields, for readers of the JSON alone.
    return schema_of(VerdictDocument, title="h3bench verdict.json", schema_id=_BASE + "verdict.schema.json",
                     computed={VerdictDocument: {"verdict": {"const": DIAGNOSTIC_VERDICT}},
                               CandidateVerdict: {"verdict": _OUTCOME},
                               DurationVerdict: {"outcome": _OUTCOME},
                               PartEffect: {"moved": {"type": ["boolean", "null"]}}})


def _ledger_record() -> dict[str, Any]:
    # A line of the ledger: the entry, and its place in the chain (h3bench.ledger.chain).
    chain: dict[str, Any] = {"seq": {"type": "integer", "minimum": 0}, "prev": _SHA256, "hash": _SHA256,
             "added_at": {"type": "string"}, "written_by": {"type": "string"},
             "supersedes": {"type": "array", "items": {"type": "integer", "minimum": 0}}}
    return schema_of(LedgerEntry, title="h3bench ledger line", schema_id=_BASE + "ledger-record.schema.json",
                     open_keys={LedgerEntry: chain})


def _export() -> dict[str, Any]:
    return schema_of(Export, title="h3bench export (h3bench export --format json)",
                     schema_id=_BASE + "export.schema.json")


def _manifest() -> dict[str, Any]:
    return schema_of(Manifest, title="h3bench manifest.json", schema_id=_BASE + "manifest.schema.json")


SCHEMAS = {"verdict.schema.json": _verdict, "ledger-record.schema.json": _ledger_record,
           "export.schema.json": _export, "manifest.schema.json": _manifest}


def derived(name: str) -> dict[str, Any]:
    """The schema ``name`` as the code derives it now."""
    return SCHEMAS[name]()


def shipped(name: str) -> dict[str, Any]:
    """The schema file ``name`` as the package ships it."""
    loaded: dict[str, Any] = json.loads(resources.files("h3bench").joinpath("data", "schemas", name).read_text())
    return loaded


def main() -> None:
    """Write every schema into the package's data directory (after a record changed)."""
    root = Path(__file__).resolve().parents[1] / "data" / "schemas"
    root.mkdir(exist_ok=True)
    for name in SCHEMAS:
        (root / name).write_text(json.dumps(derived(name), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {root / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
