"""``./dev lock``: write constraints.txt afresh, from what pip resolves today.

./dev installs its environment under constraints.txt, so that a new release
of a dependency (PyAV 18.1.1 once turned mypy red) changes nothing until the
file is refreshed on purpose: run ``./dev lock``, read the diff it prints,
then ``./dev test`` (tests_unit/test_install.py holds the file to
pyproject.toml's ranges). pyproject.toml keeps ranges, for NPU containers
that bring their own torch.

The resolve runs in a scratch virtualenv (./dev's .venv is left alone) with
``pip install --dry-run --ignore-installed --report``: the torch releases
./dev installs (the arguments) and the project with its test and report
extras, on this machine's interpreter and pip configuration.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
PROJECT = "h3bench"
EXTRAS = ".[test,report]"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(report: dict[str, Any]) -> dict[str, str]:
    """``name -> version`` of everything pip's report would install, the project itself left out."""
    found = {}
    for item in report["install"]:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if canonical(name) != PROJECT:
            found[canonical(name)] = version
    return dict(sorted(found.items()))


def render(found: dict[str, str], requested: list[str]) -> str:
    header = (
        "# ./dev's environment, pinned: pip install -c constraints.txt -e '.[test]'. Written by ./dev lock\n"
        f"# (.ci/lock.py) from one resolve of {' '.join(requested)} '{EXTRAS}' with Python\n"
        f"# {platform.python_version()} on {sys.platform} {platform.machine()}. pyproject.toml keeps ranges (NPU containers).\n"
        "# Refresh it on purpose with ./dev lock, then run ./dev test.\n"
    )
    return header + "".join(f"{name}=={version}\n" for name, version in found.items())


def read(path: Path) -> dict[str, str]:
    """The pins of a constraints file (comments and blank lines skipped)."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            found[canonical(name)] = version
    return found


def changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    return [f"  {name}: {old.get(name, '-')} -> {new.get(name, '-')}" for name in sorted(old.keys() | new.keys())
            if old.get(name) != new.get(name)]


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="h3bench-lock-") as scratch:
        venv, report = Path(scratch) / "venv", Path(scratch) / "report.json"
        subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)], check=True)
        resolved = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--dry-run", "--ignore-installed",
                                   "--report", str(report), *argv, EXTRAS], cwd=ROOT, check=False)
        if resolved.returncode != 0:
            print(f"./dev lock: pip could not resolve {' '.join(argv)} '{EXTRAS}' (exit code {resolved.returncode}); "
                  "constraints.txt is unchanged", file=sys.stderr)
            return 1
        found = pins(json.loads(report.read_text(encoding="utf-8")))
    old = read(CONSTRAINTS) if CONSTRAINTS.is_file() else {}
    partial = CONSTRAINTS.with_suffix(".txt.partial")
    partial.write_text(render(found, argv), encoding="utf-8")
    os.replace(partial, CONSTRAINTS)
    moved = changes(old, found)
    print(f"./dev lock: constraints.txt holds {len(found)} pins; {len(moved)} changed" + (":" if moved else ""))
    for line in moved:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
