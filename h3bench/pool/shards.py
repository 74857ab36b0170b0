"""The shard bundles of one campaign over several hosts: verified, checked against each other, and what is missing.

Every bundle is verified first (:func:`h3bench.session.stored.open_verified`:
a bundle that changed after it was sealed is refused, naming the files).
Then, each refusal a one-line :class:`~h3bench.errors.UsageError` with the reason:

- a bundle that is not a shard (run without ``--shard``), or one of another
  spec id, hardware kind or shard count than the first;
- a shard given twice, by content: two paths whose last segment's
  ``final.json`` has the same SHA-256 (the seal), or two different runs
  that both claim shard I of round R;
- two bundles of one round from one host posing as two shards: the same host
  name, or a device serial in common.

Shards absent from a round that is present are not refused: they are
:attr:`Shards.missing`, and the pooled verdict is INCONCLUSIVE naming them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from h3bench.course.shards import ShardHost, ShardRun
from h3bench.errors import EvidenceError, UsageError
from h3bench.evidence.codec import from_json
from h3bench.evidence.manifest import Manifest
from h3bench.session.stored import StoredBundle, open_verified
from h3bench.verdict.verdicts import ShardRecord

__all__ = ["PooledShard", "ShardBundle", "Shards", "read_shards"]


@dataclass(frozen=True)
class ShardBundle:
    """One verified shard bundle: where it is, its seal, and its manifest's shard record."""

    stored: StoredBundle
    run: ShardRun

    @property
    def path(self) -> Path:
        return self.stored.path

    @property
    def index(self) -> int:
        return self.run.index

    @property
    def count(self) -> int:
        return self.run.count

    @property
    def round(self) -> int:
        return self.run.round

    @property
    def host_name(self) -> str:
        return self.run.host.name

    @property
    def label(self) -> str:
        return f"shard {self.index}/{self.count} of round {self.round}"

    @property
    def serials(self) -> set[str]:
        return {s for s in self.run.host.device_serials if s}

    def pooled(self, blocks: int = 0) -> PooledShard:
        """What the pool's manifest (and its verdict) records of this shard."""
        stored = self.stored
        seals = stored.seals[: stored.seals.index(stored.final_sha256) + 1] if stored.final_sha256 in stored.seals \
            else (stored.final_sha256,)
        return PooledShard(self.index, self.count, self.round, self.run.host, self.path.name, stored.final_sha256,
                           blocks, str(self.path), seals)


@dataclass(frozen=True)
class PooledShard:
    """One shard as a pool's manifest names it (``pool.shards``): its shard record's place and host, and its seal.

    Written by :func:`h3bench.pool.fanin.pool_bundles` and read back through
    :mod:`h3bench.evidence.codec` by the ledger (:mod:`h3bench.ledger.campaigns`).
    """

    index: int
    count: int
    round: int
    host: ShardHost
    bundle: str  # its directory name
    final_sha256: str
    blocks: int = 0  # blocks it ran (0 in a pool's manifest: counted as they are copied)
    path: str = ""
    seals: tuple[str, ...] = ()  # every state's seal, the pooled one last (a resumed shard's earlier states first)

    def record(self) -> ShardRecord:
        """The verdict's record of the shard (verdict.json's ``pool.shards``)."""
        return ShardRecord(self.index, self.count, self.round, self.host.name, self.bundle, self.final_sha256,
                           self.blocks)

    @classmethod
    def of(cls, manifest: Manifest, *, where: str = "manifest.json") -> tuple[PooledShard, ...]:
        """The shards a pool's manifest names; empty for any other bundle; EvidenceError naming a malformed field."""
        found = manifest.pool
        if found is None:
            return ()
        try:
            shards = found.get("shards") if isinstance(found, Mapping) else None
            return from_json(tuple[PooledShard, ...], shards, where="pool.shards")
        except EvidenceError as exc:
            raise EvidenceError(f"{where}: {exc}", path=where) from None


@dataclass(frozen=True)
class Shards:
    """The shards to pool, in (round, index) order, and the shards of their rounds that were not given."""

    bundles: tuple[ShardBundle, ...]
    missing: tuple[str, ...]

    @property
    def first(self) -> ShardBundle:
        return self.bundles[0]

    @property
    def count(self) -> int:
        return self.first.count

    @property
    def rounds(self) -> tuple[int, ...]:
        return tuple(sorted({b.round for b in self.bundles}))


def _shard(stored: StoredBundle) -> ShardBundle:
    found = ShardRun.of(stored.manifest, where=f"{stored.path}/manifest.json")
    if found is None:
        raise UsageError(f"{stored.path}: not a shard of a campaign over several hosts (it ran without --shard I/N); "
                         "only shard bundles are pooled")
    return ShardBundle(stored, found)


def _refuse_mixed(bundles: list[ShardBundle]) -> None:
    first = bundles[0]
    for other in bundles[1:]:
        if other.stored.spec_id != first.stored.spec_id:
            raise UsageError(f"{other.path} is of spec {other.stored.spec_id[:12]}, {first.path} of "
                             f"{first.stored.spec_id[:12]}: bundles of different specs are never pooled")
        if other.stored.hardware_kind != first.stored.hardware_kind:
            raise UsageError(f"{other.path} ran on {other.stored.hardware_kind}, {first.path} on "
                             f"{first.stored.hardware_kind}: hardware kinds are never pooled")
        if other.count != first.count:
            raise UsageError(f"{other.path} is one of {other.count} shards, {first.path} one of {first.count}: "
                             "one campaign has one shard count")


def _refuse_twice(bundles: list[ShardBundle]) -> None:
    seals: dict[str, ShardBundle] = {}
    places: dict[tuple[int, int], ShardBundle] = {}
    for bundle in bundles:
        seal = bundle.stored.final_sha256
        if seal in seals:
            raise UsageError(f"{bundle.path} and {seals[seal].path} are the same shard ({bundle.label}, final.json "
                             f"SHA-256 {seal[:16]}…): a shard is pooled once")
        seals[seal] = bundle
        place = (bundle.round, bundle.index)
        if place in places:
            raise UsageError(f"{bundle.path} and {places[place].path} are two runs that both claim {bundle.label}: "
                             "keep the one that belongs to the campaign")
        places[place] = bundle


def _refuse_posing(bundles: list[ShardBundle]) -> None:
    for round_ in {b.round for b in bundles}:
        found = [b for b in bundles if b.round == round_]
        for i, one in enumerate(found):
            for other in found[i + 1:]:
                same = one.host_name == other.host_name
                shared = one.serials & other.serials
                if same or shared:
                    why = f"host {one.host_name}" if same else f"device serial(s) {', '.join(sorted(shared))}"
                    raise UsageError(f"{one.path} ({one.label}) and {other.path} ({other.label}) ran on the same "
                                     f"{why}: one host cannot pose as two shards, host is the blocking factor")


def read_shards(paths: Sequence[str | Path]) -> Shards:
    """Verify every bundle, refuse what cannot be pooled, and name the shards missing from each round."""
    if not paths:
        raise UsageError("h3bench pool needs the shard bundles to pool")
    bundles = sorted((_shard(open_verified(p)) for p in paths), key=lambda b: (b.round, b.index))
    _refuse_mixed(bundles)
    _refuse_twice(bundles)
    _refuse_posing(bundles)
    count = bundles[0].count
    missing = tuple(f"shard {i}/{count} of round {r}" for r in sorted({b.round for b in bundles})
                    for i in range(1, count + 1) if not any(b.round == r and b.index == i for b in bundles))
    return Shards(tuple(bundles), missing)
