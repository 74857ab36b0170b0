"""One campaign, one identity: the shards of a campaign over several hosts, their pool and any re-pool are one campaign.

A sharded campaign (``h3bench run --shard I/N`` on N hosts, then ``h3bench
pool``) leaves several bundles: one per shard, and one per pool of them.
Each has its own seal, but they hold one campaign's blocks, so the ledger
(:mod:`~h3bench.ledger.chain`) and the history (:mod:`~h3bench.ledger.history`)
know them by the campaign's identity, :class:`CampaignKey`: the spec id and
the set of shard seals (the SHA-256 of each shard's ``final.json``).

- A shard's key is its own seals (every state of it, if it was resumed).
- A pool's key is the seals of the shards it pooled, as its manifest names
  them (:mod:`h3bench.pool.fanin`).
- A pool *folds* a shard it pooled, and a pool of some of its shards (one
  with a shard missing, or of fewer rounds); a re-pool of the same shards
  folds the first pool and the first folds it: they are the same campaign.
- Two pools of one spec that share a shard but neither folds the other
  give two accounts of one campaign.

A bundle run without ``--shard`` has no such key: it is its own campaign,
known by its seals (:class:`~h3bench.ledger.entries.BundleRef`).
"""

from __future__ import annotations

from dataclasses import dataclass

from h3bench.course.shards import ShardRun
from h3bench.evidence.manifest import Manifest
from h3bench.pool.shards import PooledShard

__all__ = ["CampaignKey", "ShardMark", "pooled_shards", "shard_mark"]


@dataclass(frozen=True)
class ShardMark:
    """Shard ``index`` of ``count`` in ``round``, run on ``host``, sealed as ``final_sha256``."""

    index: int
    count: int
    round: int
    host: str
    final_sha256: str
    seals: tuple[str, ...] = ()  # a pooled shard's earlier states' seals too (empty: a pool written before them)

    @property
    def label(self) -> str:
        """``shard 1/2`` (``shard 1/2 of round 2`` after the first round)."""
        return f"shard {self.index}/{self.count}" + (f" of round {self.round}" if self.round != 1 else "")


def shard_mark(manifest: Manifest, seal: str, *, where: str = "manifest.json") -> ShardMark | None:
    """The manifest's shard record (a bundle of ``--shard I/N``) with the bundle's seal; None for any other bundle.

    EvidenceError naming the field when the record is malformed (:meth:`~h3bench.course.shards.ShardRun.of`).
    """
    found = ShardRun.of(manifest, where=where)
    return None if found is None else ShardMark(found.index, found.count, found.round, found.host.name, seal)


def pooled_shards(manifest: Manifest, *, where: str = "manifest.json") -> tuple[ShardMark, ...]:
    """The shards a pooled bundle's manifest names, each by its seal; empty for any other bundle.

    EvidenceError naming the field when the record is malformed (:meth:`~h3bench.pool.shards.PooledShard.of`).
    """
    return tuple(ShardMark(s.index, s.count, s.round, s.host.name, s.final_sha256, s.seals)
                 for s in PooledShard.of(manifest, where=where))


@dataclass(frozen=True)
class CampaignKey:
    """The identity of a sharded campaign as one bundle of it knows it: the spec id and shard seals.

    ``seals``: a pool's shard seals, or a shard's own seals (every state of it).
    """

    spec_id: str
    seals: frozenset[str]
    pooled: bool

    @classmethod
    def of(cls, spec_id: str, shard: ShardMark | None, pooled: tuple[ShardMark, ...],
           own_seals: tuple[str, ...] = ()) -> CampaignKey | None:
        """The key of a shard (``shard``, with the seals of its states) or a pool (``pooled``); None otherwise."""
        if pooled:  # every state of each shard it pooled: an earlier state of a resumed shard is its campaign too
            return cls(spec_id, frozenset(seal for s in pooled for seal in (*s.seals, s.final_sha256)), True)
        if shard is not None:
            return cls(spec_id, frozenset((*own_seals, shard.final_sha256)), False)
        return None

    def folds(self, other: CampaignKey) -> bool:
        """Whether this pool holds ``other``'s blocks: a shard it pooled, or a pool of some (or all) of its shards."""
        if not self.pooled or self.spec_id != other.spec_id:
            return False
        return other.seals <= self.seals if other.pooled else bool(other.seals & self.seals)

    def disagrees(self, other: CampaignKey) -> bool:
        """Two pools that share a shard while neither folds the other: two accounts of one campaign."""
        return (self.pooled and other.pooled and self.spec_id == other.spec_id and bool(self.seals & other.seals)
                and not self.folds(other) and not other.folds(self))
