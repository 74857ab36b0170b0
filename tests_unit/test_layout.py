"""The package's layout: one package per stage, imports only downward, no cycle, a plugin that costs nothing.

Imports are read from the source with :mod:`ast`, every kind of them: at
module level, inside functions (the lazy ones) and under ``TYPE_CHECKING``
(a type that a lower module takes from a higher one is still an arrow back
up). The order of the packages is docs/layout.md's; a new package
must be placed in it. The conformance lanes (``conformance/``, beside
``h3bench/`` and not in its wheel) stand above every package: they may
import h3bench, and h3bench never imports them.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "h3bench"
# Top-level packages of the checkout outside the wheel, above all of h3bench's.
OUTSIDE = ("conformance",)
# What every stage shares, then the packages from the bottom up: each imports only those before it.
SHARED = ("errors", "h3", "outcome", "interrupts")
LAYERS = ("evidence", "media", "metrics", "stats", "quality", "runspec", "host", "server", "course", "sim", "run",
          "plan", "verdict", "report", "session", "pool", "ledger", "bisect", "plugin", "cli")
# The simulator is a program of its own: it shares only the H3 facts and the error tree with the harness.
SIM_MAY_IMPORT = {"h3bench.h3", "h3bench.errors"}
HEAVY = ("numpy", "scipy", "pydantic", "av", "torch", "httpx")
# One job per module: a module past this many lines holds several, except these, each long with one job and its
# references at hand (issue 38).
MAX_LINES = 470
LONG_WITH_ONE_JOB = {"h3bench.stats.sequential", "h3bench.server.process", "h3bench.quality.engine"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in (p for top in ("h3bench", *OUTSIDE) for p in (ROOT / top).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _target(name: str) -> str:
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(module: str) -> Iterator[str]:
    """Every h3bench (or conformance) module that ``module`` imports, wherever the import stands."""
    ours = ("h3bench", *OUTSIDE)
    for node in ast.walk(ast.parse(MODULES[module].read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ours:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in MODULES else _target(node.module)
        elif isinstance(node, ast.Import):
            yield from (_target(a.name) for a in node.names if a.name.split(".")[0] in ours)


GRAPH = {module: set(imports_of(module)) - {module} for module in MODULES}


def stage(module: str) -> str:
    """``h3bench.run.block`` → ``run``; a shared top-level module is its own name; the package itself is ``h3bench``;
    ``conformance.run`` → ``conformance``."""
    parts = module.split(".")
    if parts[0] in OUTSIDE:
        return parts[0]
    return parts[1] if len(parts) > 1 else "h3bench"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_top_level_holds_only_what_every_stage_shares_and_the_stage_packages():
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert top == set(SHARED)
    assert packages == set(LAYERS)


def test_no_module_is_longer_than_one_job_needs():
    lengths = {module: len(path.read_text(encoding="utf-8").splitlines()) for module, path in MODULES.items()}
    assert {module: n for module, n in lengths.items() if n > MAX_LINES and module not in LONG_WITH_ONE_JOB} == {}


def test_no_import_cycle_counting_lazy_and_type_checking_imports():
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle_through_a_type_checking_import():
    graph = {**GRAPH, "h3bench.stats.speed": GRAPH["h3bench.stats.speed"] | {"h3bench.verdict.verdicts"}}
    assert any("h3bench.stats.speed" in c and "h3bench.verdict.verdicts" in c for c in cycles(graph))


def arrows_back_up(graph: dict[str, set[str]]) -> list[str]:
    rank = {name: i for i, name in enumerate((*LAYERS, *OUTSIDE))}
    found = []
    for module, targets in graph.items():
        here = stage(module)
        for target in targets:
            there = stage(target)
            if there in SHARED or there == "h3bench" or there == here:
                continue
            if here in SHARED or rank[there] > rank[here]:
                found.append(f"{module} -> {target}")
    return sorted(found)


def test_a_package_imports_only_the_packages_below_it():
    assert arrows_back_up(GRAPH) == []


def test_an_arrow_back_up_is_found():
    graph = {**GRAPH, "h3bench.run.block": GRAPH["h3bench.run.block"] | {"h3bench.session.results"}}
    assert arrows_back_up(graph) == ["h3bench.run.block -> h3bench.session.results"]


def test_h3bench_never_imports_the_conformance_lanes_which_import_h3bench():
    # The lanes are read: they import h3bench (allowed) ...
    assert any(stage(t) in LAYERS for m, targets in GRAPH.items() if stage(m) == "conformance" for t in targets)
    # ... and an arrow from h3bench into them, which the wheel could not follow, is one back up.
    graph = {**GRAPH, "h3bench.cli": GRAPH["h3bench.cli"] | {"conformance.run"}}
    assert arrows_back_up(graph) == ["h3bench.cli -> conformance.run"]


# The design's mode is asked of the Design (``Design.of(spec).sequential``), never branched on elsewhere (issue 43).
DESIGN_MODE_HOME = {"h3bench.course.design", "h3bench.runspec.tables", "h3bench.runspec.spec"}


def mode_branches(sources: dict[str, str]) -> list[str]:
    """Every ``DesignMode.<member>`` outside the Design's own module and the spec's tables, as ``module:line``."""
    return sorted(f"{module}:{node.lineno}" for module, text in sources.items() if module not in DESIGN_MODE_HOME
                  for node in ast.walk(ast.parse(text))
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id == "DesignMode")


def test_the_design_mode_is_asked_of_the_design_not_branched_on_outside_it():
    sources = {module: path.read_text(encoding="utf-8") for module, path in MODULES.items()}
    assert mode_branches(sources) == []
    spoiled = {"h3bench.plan.summary": "if spec.protocol.design is DesignMode.SEQUENTIAL:\n    pass\n"}
    assert mode_branches(spoiled) == ["h3bench.plan.summary:1"]


def test_the_simulator_imports_only_the_h3_facts_and_the_error_tree():
    outside = {f"{m} -> {t}" for m, targets in GRAPH.items() if stage(m) == "sim"
               for t in targets if stage(t) != "sim" and t not in SIM_MAY_IMPORT}
    assert outside == set()


def test_the_harness_and_the_simulator_name_the_same_variables():
    """They are separate programs: each names the variable, and these must agree."""
    from h3bench import sim
    from h3bench.host.staging import STAGED_ENV
    from h3bench.run.launch import BLOCK_ID_ENV
    from h3bench.runspec.arms import SIM_PROFILE_ENV
    from h3bench.sim import app

    assert (SIM_PROFILE_ENV, BLOCK_ID_ENV) == (sim.PROFILE_ENV, app.BLOCK_ID_ENV)
    assert STAGED_ENV == app.STAGED_ENV


@pytest.mark.parametrize("module", ["h3bench.plugin", "h3bench.cli"])
def test_importing_the_plugin_or_the_command_line_loads_nothing_heavy(module):
    """A pytest run of any project where h3bench is installed pays for the plugin's import."""
    code = f"import sys, json, {module}; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout)
    expected = [] if module == "h3bench.plugin" else ["av", "numpy"]  # compare and probe decode at once
    assert loaded == expected
