"""Path options in either form, ``--runspec FILE`` or ``--runspec=FILE``, leave pytest's rootdir alone.

pytest decides its rootdir and configuration file before it loads plugins, so
it takes the value of an option it does not know yet, written with a space,
for a test path: ``pytest --baseline-evidence /elsewhere/BUNDLE`` made
``/elsewhere`` the rootdir, ignored the project's ``pytest.ini`` (its
testpaths and addopts) and resolved relative paths against the wrong
directory. Once the plugin's options are known, :func:`repair_rootdir`
decides the rootdir again from the real test paths, as pytest would have,
and, when it differs, puts the right one in place, with its ini file's
settings and ``addopts``, before pytest uses any of them.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from _pytest.config.findpaths import determine_setup

__all__ = ["PATH_OPTIONS", "repair_rootdir"]

PATH_OPTIONS = ("--runspec", "--baseline-evidence", "--evidence-dir", "--lpips-dir", "--resume", "--looks")


def repair_rootdir(config: pytest.Config, args: list[str]) -> None:
    """Decide the rootdir from the test paths alone (the options' values are not test paths)."""
    known = config.known_args_namespace
    rootpath, inipath, inicfg, ignored = determine_setup(
        inifile=known.inifilename,
        override_ini=known.override_ini,
        args=known.file_or_dir,
        rootdir_cmd_arg=known.rootdir or None,
        invocation_dir=config.invocation_params.dir,
    )
    if (rootpath, inipath) == (config.rootpath, config.inipath):
        return
    # pytest has no public way to decide its rootdir again, and decided it before plugins could add their
    # options; Config.parse set these once and has not used them yet. Each is written for its own reason:
    config._rootpath = rootpath  # config.rootpath: where the default RunSpec and the test paths resolve
    config._inipath = inipath  # config.inipath: which pytest.ini is the project's
    config._inicfg = inicfg  # that file's settings (testpaths, markers, filterwarnings)
    config._ignored_config_files = ignored  # what pytest reports as ignored beside it
    config._inicache.clear()  # getini() cached values read from the wrong file
    config._parser.extra_info.update(rootdir=str(rootpath), inifile=str(inipath))  # the header and usage errors
    args[:0] = config.getini("addopts")  # as pytest prepends them from the right ini file
    config.known_args_namespace = config._parser.parse_known_args(
        args, namespace=copy.copy(config.option)
    )
    if config.known_args_namespace.confcutdir is None:
        config.known_args_namespace.confcutdir = str(Path(inipath).parent if inipath else rootpath)
