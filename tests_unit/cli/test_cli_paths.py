"""Every path a command writes that is a directory, read-only, or on a full disk gives one line (issue 27).

The read-only and full file systems are real: a tmpfs of one megabyte filled
to the last byte and a read-only bind mount, made in a private mount
namespace (:mod:`tests_unit.fsroom`); the test is skipped, with the reason,
only where no such namespace can be had.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from h3bench.cli import main
from tests_unit.bundlesim import npu_spec, write_bundle
from tests_unit.fsroom import in_namespace, namespace_unavailable


def a_bundle(root: Path) -> Path:
    return write_bundle(root, npu_spec(clean={}), lambda block, index: {"baseline": 100.0, "clean": 90.0}[block.arm]
                        * (1 + 0.002 * index), started_at="2026-11-20T10:00:00.000Z")


def test_history_html_that_is_a_directory_is_one_line_before_any_work(tmp_path, capsys):
    a_bundle(tmp_path / "evidence")

    code = main(["history", str(tmp_path / "evidence"), "--html", str(tmp_path)])

    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == f"h3bench: error: {tmp_path}: is a directory; the --html page needs a file name\n"


SCRIPT = '''
full, ro = Path(ARGS["full"]), Path(ARGS["ro"])
mount_tmpfs(full, "1m")
fill(full)
read_only(ro)
found = {}
for name, where in (("full", full), ("read-only", ro)):
    found[f"ledger add, {name}"] = h3bench("ledger", "add", ARGS["bundle"], "--ledger", where / "ledger.jsonl")
    found[f"history --html, {name}"] = h3bench("history", ARGS["evidence"], "--html", where / "history.html")
    found[f"left in {name}"] = sorted(p.name for p in where.iterdir())
print(json.dumps(found))
'''


@pytest.mark.skipif(namespace_unavailable() is not None, reason=str(namespace_unavailable()))
def test_a_read_only_or_full_file_system_is_one_line_never_a_traceback(tmp_path):
    """Issue 27: ``history --html <read-only path>`` raised OSError [Errno 30]; a full disk, ENOSPC tracebacks."""
    bundle = a_bundle(tmp_path / "evidence")
    (tmp_path / "ro").mkdir()

    found = in_namespace(SCRIPT, {"full": str(tmp_path / "full"), "ro": str(tmp_path / "ro"), "bundle": str(bundle),
                                  "evidence": str(tmp_path / "evidence")})

    for case in ("ledger add, full", "ledger add, read-only", "history --html, full", "history --html, read-only"):
        result = found[case]
        assert result["code"] in (1, 2) and "Traceback" not in result["err"], (case, result)
        assert len(result["err"].splitlines()) == 1 and result["err"].startswith("h3bench: error: "), (case, result)
    full, ro = tmp_path / "full", tmp_path / "ro"
    assert found["ledger add, full"]["err"].startswith(f"h3bench: error: no space left on {full} (writing {full}/")
    assert "Read-only file system" in found["ledger add, read-only"]["err"]
    assert found["history --html, full"]["err"] == (f"h3bench: error: {full}/history.html: the --html page cannot be "
                                                    "written (no space left on its file system)\n")
    assert found["history --html, read-only"]["err"] == (f"h3bench: error: {ro}/history.html: the --html page cannot "
                                                         "be written (Read-only file system)\n")
    # Nothing half-written is left behind: no ledger without its entries, no truncated page.
    assert found["left in full"] in (["ballast"], ["ballast", "ledger.jsonl.lock"]), found["left in full"]
    assert found["left in read-only"] == []
