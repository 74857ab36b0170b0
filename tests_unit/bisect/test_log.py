"""The bisection log: hash-chained, append-only, a torn append dropped, an edited line refused by number."""

from __future__ import annotations

import json

import pytest

from h3bench.bisect.log import LOG_NAME, BisectionLog
from h3bench.errors import EvidenceError


def test_records_chain_and_an_edit_is_named(tmp_path):
    log = BisectionLog(tmp_path / LOG_NAME)
    log.append("start", spec_id="a")
    log.append("probe", position=3, final_sha256="f" * 64)
    log.append("stop", reason="posterior")
    assert [r["event"] for r in log.read()] == ["start", "probe", "stop"] and log.has_seal("f" * 64)
    lines = log.path.read_text().splitlines()
    record = json.loads(lines[1])
    record["position"] = 4
    log.path.write_text("\n".join([lines[0], json.dumps(record), lines[2]]) + "\n")
    with pytest.raises(EvidenceError, match="line 2: hash does not match"):
        log.read()
    log.path.write_text("\n".join([lines[0], lines[2]]) + "\n")  # a line removed
    with pytest.raises(EvidenceError, match="line 2: seq is 2, expected 1; prev does not match"):
        log.read()


def test_a_torn_append_is_not_a_record_and_the_next_append_drops_it(tmp_path):
    log = BisectionLog(tmp_path / LOG_NAME)
    log.append("start", spec_id="a")
    with log.path.open("ab") as f:
        f.write(b'{"seq": 1, "event": "pro')  # a crash in the middle of an append
    assert log.torn and [r["event"] for r in log.read()] == ["start"]
    log.append("probe", position=2)
    assert not log.torn and [r["seq"] for r in log.read()] == [0, 1]
