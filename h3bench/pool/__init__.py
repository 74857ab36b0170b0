"""One campaign over several hosts, fanned in: the shards' bundles verified, pooled with host as a block, and sealed.

- :mod:`~h3bench.pool.shards`: which bundles may be pooled (verified, one spec
  and hardware kind, no shard twice, no host posing as two), and which shards
  are missing;
- :mod:`~h3bench.pool.fanin`: the pooled bundle and its verdict (speed with
  host as a blocking factor, quality on every matched pair, lossless within
  hosts, a host whose baseline stands out);
- :mod:`~h3bench.pool.looks`: the look across hosts, and the look file the
  next round of shards reads.

The split itself is :mod:`h3bench.course.shards`; the statistics are
:mod:`h3bench.stats.hosts`. ``h3bench pool`` is :mod:`h3bench.cli.pool`.
"""

from __future__ import annotations

from h3bench.pool.fanin import Pooled, pool_bundles
from h3bench.pool.looks import next_window, window_lines, write_window
from h3bench.pool.shards import Shards, read_shards

__all__ = ["Pooled", "Shards", "next_window", "pool_bundles", "read_shards", "window_lines", "write_window"]
