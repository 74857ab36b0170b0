"""``python -m h3bench.cli``: the ``h3bench`` command line (see :func:`h3bench.cli.console`)."""

import sys

from h3bench.cli import console

sys.exit(console())
