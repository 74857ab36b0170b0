"""The conformance environment: vLLM and vLLM-Omni from PyPI in a virtualenv outside the repository.

:func:`ensure_environment` makes ``<cache>/conformance/<engine>/venv`` on
first use (``<cache>`` is ``$H3BENCH_CACHE_DIR``, else
``$XDG_CACHE_HOME/h3bench``, else ``~/.cache/h3bench``) and reuses it while
its stamp matches the recipe (:data:`ENGINES_PATH`, ``conformance/engines.toml``) and the
interpreter, as ``./dev`` does for ``.venv``. The install is one
``pip --isolated install`` of the recipe's packages, so that the machine's
pip configuration (a local wheel directory, local indexes, constraints) is
not used: the environment is what PyPI serves, as on a fresh machine. Then
the build checks that torch, torchvision, torchaudio, torchcodec, vLLM,
vLLM-Omni's API server and h3bench's simulator content (through
``PYTHONPATH``, see below) import. Any failure raises
:class:`EnvironmentBuildError` with the step, the exit code and the tail of
the step's log; the environment is then left unstamped, so the next run
builds it again.

h3bench is not installed into the environment. Its stand-in engine needs
only the simulator's content code and the packages the environment already
has (numpy, PyAV, pydantic, FastAPI), so the server is launched with
``PYTHONPATH`` set to the checkout (:func:`server_command`); one environment
then serves every checkout and worktree, and nothing of h3bench's heavy
dependencies is added to it.

What a build measures (:class:`BuildReport`): bytes downloaded (the sizes
pip prints for the files it downloads), the install's wall time, the
environment's size on disk, and the import check's time (made after a build only).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from h3bench.errors import H3BenchError, UsageError
from h3bench.evidence.files import read_toml
from h3bench.metrics.lpips_sdist import cache_dir

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES_PATH",
    "BuildReport",
    "EngineRecipe",
    "EnvironmentBuildError",
    "ensure_environment",
    "environment_root",
    "load_recipe",
    "parse_download_bytes",
    "server_command",
]

DEFAULT_ENGINE = "0.30.0"
ENGINES_PATH = Path(__file__).resolve().with_name("engines.toml")
REPO_ROOT = Path(__file__).resolve().parents[1]
_STAMP = ".h3bench-conformance.json"
_BUILDER_VERSION = 1  # bump when the way the environment is built changes
_VERSION = re.compile(r"\d+(\.\d+){1,3}([a-z]+\d*)?(\.post\d+)?")
_DOWNLOADED = re.compile(r"Downloading \S+ \(([\d.]+) (bytes|kB|MB|GB)\)")
_UNITS = {"bytes": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}
_PACKAGE_ORDER = ("vllm", "vllm-omni", "torch", "torchvision", "torchaudio", "torchcodec")
IMPORT_CHECK = (
    "import torch, torchvision, torchaudio, torchcodec, vllm, vllm_omni\n"
    "from vllm_omni.entrypoints.openai.api_server import router, profiler_router\n"
    "import h3bench.sim.content, conformance.upstream_app\n"
    "print(torch.__version__, torchvision.__version__, vllm.__version__, vllm_omni.__version__)\n"
)


class EnvironmentBuildError(H3BenchError):
    """The conformance environment could not be built (``step=``, ``exit_code=``, ``log_tail=``, ``log_path=``)."""

    def __init__(self, message: str, *, step: str, exit_code: int | None = None, log_tail: str = "",
                 log_path: str | None = None) -> None:
        super().__init__(message)
        self.step = step
        self.exit_code = exit_code
        self.log_tail = log_tail
        self.log_path = log_path


@dataclass(frozen=True)
class EngineRecipe:
    """What one engine's environment installs: one requirement per package, pinned or not."""

    engine: str
    requirements: tuple[str, ...]
    derived: bool  # not in engines.toml: torchvision, torchaudio and torchcodec left to pip's resolver

    def digest(self, python: str) -> str:
        """What the stamp holds: the recipe, the interpreter's version and the builder's."""
        text = json.dumps({"requirements": list(self.requirements), "python": python, "builder": _BUILDER_VERSION})
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class BuildReport:
    """What :func:`ensure_environment` did and measured (sizes in bytes, times in seconds)."""

    engine: str
    root: str
    python: str
    reused: bool
    requirements: tuple[str, ...]
    derived: bool
    download_bytes: int | None
    install_s: float | None
    check_s: float
    disk_bytes: int
    versions: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        gb = 1e9
        figures = (f"{(self.download_bytes or 0) / gb:.2f} GB downloaded, installed in {self.install_s:.0f} s"
                   if self.install_s is not None else "")
        built = f"reused (built earlier: {figures})" if self.reused and figures else "reused" if self.reused else \
            f"built: {figures}"
        return (f"conformance environment {self.root} ({self.engine}{', derived recipe' if self.derived else ''}): "
                f"{built}; {self.disk_bytes / gb:.1f} GB on disk"
                + (f"; imports checked in {self.check_s:.1f} s" if not self.reused else "") + f" ({self.versions})")


def environment_root(engine: str) -> Path:
    return cache_dir() / "conformance" / engine


def load_recipe(engine: str, path: Path = ENGINES_PATH) -> EngineRecipe:
    """The recipe of ``engine``: its row of ``engines.toml``, else a derived one (see the file's header).

    Raises
    ------
    UsageError
        ``engine`` is not a version number, or its row lacks a package.
    """
    if not _VERSION.fullmatch(engine):
        raise UsageError(f"--engine takes a vLLM-Omni release such as {DEFAULT_ENGINE}, got {engine!r}")
    table = read_toml(path, "engine recipes").get("engines", {})
    row = table.get(engine)
    if row is None:
        return EngineRecipe(engine, (f"vllm=={engine}", f"vllm-omni=={engine}", "torchvision", "torchaudio",
                                     "torchcodec"), derived=True)
    missing = [name for name in _PACKAGE_ORDER if not isinstance(row.get(name), str)]
    extra = sorted(set(row) - set(_PACKAGE_ORDER))
    if missing or extra:
        raise UsageError(f"{path}: [engines.\"{engine}\"] needs a version for each of {list(_PACKAGE_ORDER)}"
                         f" (missing {missing}, unknown {extra})")
    return EngineRecipe(engine, tuple(f"{name}=={row[name]}" for name in _PACKAGE_ORDER), derived=False)


def parse_download_bytes(pip_log: str) -> int:
    """Bytes pip downloaded, from the sizes it prints (``Downloading vllm-0.30.0-….whl (314.9 MB)``)."""
    return round(sum(float(value) * _UNITS[unit] for value, unit in _DOWNLOADED.findall(pip_log)))


def _disk_bytes(path: Path) -> int:
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                pass
    return total


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _run(step: str, argv: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None,
         echo: bool = False) -> str:
    """Run one build step, its output appended to ``log_path`` (and echoed); raise EnvironmentBuildError on failure."""
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(argv)}\n")
        log.flush()
        chunks = []
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=None if env is None else dict(env)) as process:
            assert process.stdout is not None
            for line in process.stdout:
                chunks.append(line)
                log.write(line)
                if echo and line.startswith(("Installing", "Successfully", "ERROR")):
                    print(f"  {line.rstrip()[:160]}", file=sys.stderr, flush=True)
            code = process.wait()
    output = "".join(chunks)
    if code != 0:
        raise EnvironmentBuildError(f"building the conformance environment failed at {step} (exit code {code}); "
                                    f"log: {log_path}\n{_tail(output)}", step=step, exit_code=code,
                                    log_tail=_tail(output), log_path=str(log_path))
    return output


def _check_env(python: Path) -> dict[str, str]:
    """The environment for the import check and the server: PYTHONPATH is the checkout, pip's variables go."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def _check(python: Path, log_path: Path) -> tuple[float, str]:
    start = time.perf_counter()
    output = _run("the import check", [str(python), "-c", IMPORT_CHECK], log_path, env=_check_env(python))
    return time.perf_counter() - start, output.strip().splitlines()[-1] if output.strip() else ""


def ensure_environment(engine: str = DEFAULT_ENGINE, *, root: Path | None = None, python: str | None = None,
                       echo: bool = True) -> BuildReport:
    """Make (or reuse) the conformance environment of ``engine`` and check that it imports.

    Parameters
    ----------
    engine
        The vLLM-Omni release.
    root
        Where the environment lives; default :func:`environment_root`.
    python
        The interpreter the virtualenv is made from; default the one running
        h3bench (its base interpreter when that is a virtualenv).
    echo
        Print pip's progress lines to stderr while it runs.

    Raises
    ------
    EnvironmentBuildError
        A step failed: creating the virtualenv, the install (a version pip
        cannot find, no network), or the import check (for a derived recipe,
        with the advice to pin the torch family in engines.toml).
    UsageError
        ``engine`` is not a release number (:func:`load_recipe`).
    """
    recipe = load_recipe(engine)
    root = root or environment_root(engine)
    base = python or getattr(sys, "_base_executable", None) or sys.executable
    venv = root / "venv"
    venv_python = venv / "bin" / "python"
    stamp_path = venv / _STAMP
    py_version = subprocess.run([base, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                                text=True, check=False).stdout.strip() or "unknown"
    want = recipe.digest(py_version)
    root.mkdir(parents=True, exist_ok=True)
    log_path = root / "build.log"
    try:
        stamp = json.loads(stamp_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        stamp = {}
    if stamp.get("digest") == want and venv_python.exists():
        # Reused as the build's check left it (importing vLLM takes 20-40 s; the servers' start is the next check).
        return BuildReport(engine, str(root), py_version, True, recipe.requirements, recipe.derived,
                           stamp.get("download_bytes"), stamp.get("install_s"), 0.0, _disk_bytes(venv),
                           stamp.get("versions", ""))

    log_path.write_text(f"h3bench conformance environment {engine}: {' '.join(recipe.requirements)}\n", encoding="utf-8")
    if venv.exists():
        shutil.rmtree(venv)  # a partial or outdated environment: start again
    if echo:
        print(f"conformance: building {venv} from PyPI ({' '.join(recipe.requirements)}); log {log_path}",
              file=sys.stderr, flush=True)
    start = time.perf_counter()
    _run("creating the virtualenv", [base, "-m", "venv", str(venv)], log_path)
    # --isolated: no pip configuration or PIP_* variables of this machine (local wheels, indexes, constraints).
    pip = [str(venv_python), "-m", "pip", "--isolated", "--disable-pip-version-check"]
    # --no-compile: byte-compiling 9 GB of packages costs minutes of CPU; the import check and the servers compile
    # only what they import.
    output = _run("pip install", [*pip, "install", "--progress-bar", "off", "--no-compile", *recipe.requirements],
                  log_path, echo=echo)
    install_s = time.perf_counter() - start
    download = parse_download_bytes(output)
    try:
        check_s, versions = _check(venv_python, log_path)
    except EnvironmentBuildError as exc:
        if recipe.derived:
            raise EnvironmentBuildError(
                f"{exc}\nThe environment of {engine} was derived (no row in {ENGINES_PATH}); pin torch, "
                "torchvision, torchaudio and torchcodec there at versions that import together.",
                step=exc.step, exit_code=exc.exit_code, log_tail=exc.log_tail, log_path=exc.log_path) from None
        raise
    stamp_path.write_text(json.dumps({"digest": want, "engine": engine, "requirements": list(recipe.requirements),
                                      "download_bytes": download, "install_s": install_s, "versions": versions,
                                      "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1),
                          encoding="utf-8")
    return BuildReport(engine, str(root), py_version, False, recipe.requirements, recipe.derived, download, install_s,
                       check_s, _disk_bytes(venv), versions)


def server_command(engine: str, *args: str, root: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """The argv and the environment that run :mod:`conformance.upstream_app` in ``engine``'s environment.

    Raises
    ------
    UsageError
        The environment has not been built (or not completely): run ``./dev conformance`` first.
    """
    root = root or environment_root(engine)
    python = root / "venv" / "bin" / "python"
    if not (python.exists() and (root / "venv" / _STAMP).exists()):
        raise UsageError(f"the conformance environment of vLLM-Omni {engine} is not built ({root}); "
                         f"run ./dev conformance --engine {engine} first")
    return [str(python), "-m", "conformance.upstream_app", *args], _check_env(python)
