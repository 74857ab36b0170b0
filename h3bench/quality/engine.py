"""The quality engine: many comparisons of output files, each file decoded once.

A batch of comparisons (baseline, candidate, requested seconds) is split into
groups of files that are compared with one another (the connected components
of the comparisons). Each group is decoded in one pass: every file on its own
thread (PyAV releases the GIL), all of them in lockstep, a few frames ahead of
the metrics. Each frame index then serves every pair it belongs to:

- SSIM and PSNR of each pair (:class:`~h3bench.metrics.ssim_psnr.VideoComparison`);
- AlexNet features once per distinct frame, then only LPIPS's cheap heads per
  pair (:class:`~h3bench.metrics.lpips.LpipsNetwork`);
- each file's frame count, timestamps and decoded digest, counted by this
  same decode (the probe contract: counts are verified by decoding);

and each file's PCM is decoded once and its spectra computed once for all of
its pairs (:mod:`~h3bench.metrics.spectra_files`: in memory for short clips,
in temporary files for long ones).
Memory stays bounded: the PCM, a few frames per file, and one frame's
features per file. Then :func:`h3bench.quality.gates.assemble` turns each
pair's measurements into its checks, so every report is what
:func:`h3bench.quality.compare` gives for that pair alone.

Files are known by their SHA-256: what an engine decoded (probe, digest) and
compared is kept for its lifetime, so the campaign's judge keeps one engine
for the session.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from h3bench import media
from h3bench.errors import MediaDecodeError, MediaShapeError, WeightIntegrityError
from h3bench.evidence.hashing import sha256_file
from h3bench.h3 import expected_shape, frame_count
from h3bench.media.prefetch import prefetch
from h3bench.quality.checks import QualityReport, Thresholds
from h3bench.quality.files import Probed, require_readable
from h3bench.quality.gates import LpipsSettings, Measured, assemble, audio_trim_count

if TYPE_CHECKING:
    from h3bench.metrics.audio import Spectra
    from h3bench.metrics.lpips import LpipsNetwork, LpipsWeights
    from h3bench.metrics.ssim_psnr import VideoComparison

__all__ = ["Comparison", "Engine", "components", "decoder_threads"]

_PREFETCH_FRAMES = 16  # decoded frames held ahead over a group's files (at least 4 per file)
_ONE_THREAD_SHARE = 0.9  # a file needing less than this much of one core decodes on one thread

_PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Comparison:
    """One pair to compare, and the seconds that were requested for it (None: no duration checks)."""

    baseline: _PathLike
    candidate: _PathLike
    expect_seconds: float | None = None


@dataclass
class _File:
    """One file: what its decode found, kept by the engine."""

    path: str
    sha256: str
    size: int = 0  # bytes, which set its decoder threads (decoder_threads)
    info: media.MediaInfo | None = None
    error: str | None = None
    pcm: np.ndarray | None = None  # dropped once its group's reports are made
    digest: media.DecodedDigest | None = None
    spectra: dict[int, Spectra] = field(default_factory=dict)  # by trimmed sample count

    def probed(self, role: str) -> Probed:
        return Probed(role, self.path, self.info, self.error)


@dataclass(frozen=True)
class _End:
    """The last item of a file's decode: what it counted, or why it failed."""

    info: media.MediaInfo | None
    error: str | None
    pcm: np.ndarray | None = None
    video_sha256: str | None = None
    spectra: tuple[int, Spectra] | None = None  # computed beside the other files' decodes


@dataclass
class _Pair:
    """One comparison while its group decodes."""

    comparison: Comparison
    key: tuple[Any, ...]
    base: _File
    cand: _File
    video: VideoComparison | None = None
    video_error: str | None = None
    lpips: list[float] = field(default_factory=list)
    lpips_error: str | None = None


def components(edges: Iterable[tuple[Any, Any]]) -> list[list[int]]:
    """Indices of ``edges`` grouped by the connected components of their endpoints, in first-seen order."""
    edges = list(edges)
    parent: dict[Any, Any] = {}

    def root(node: Any) -> Any:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for a, b in edges:
        parent[root(a)] = root(b)
    groups: dict[Any, list[int]] = {}
    for index, (a, _) in enumerate(edges):
        groups.setdefault(root(a), []).append(index)
    return list(groups.values())


class Engine:
    """Compares batches of output pairs, decoding each file once per batch, and remembers what it found.

    Parameters
    ----------
    thresholds
        The gate thresholds of every report.
    lpips
        Whether and how to measure LPIPS; the weights are authenticated once,
        on first need.
    digests
        Also hash each file's decoded frames and PCM while decoding
        (:meth:`digest`), for the exact-equality diagnostics.
    """

    def __init__(self, *, thresholds: Thresholds, lpips: LpipsSettings, digests: bool = False,
                 on_frames: Callable[[int, int | None], None] | None = None) -> None:
        self.thresholds = thresholds
        self.lpips = lpips
        self.digests = digests
        # Told (frames done, frames expected or None) after each frame index of a compare_many: its progress.
        self.on_frames = on_frames
        self._frames = (0, 0)  # frames done before the current group, and the call's expected total
        self._files: dict[str, _File] = {}  # by path
        self._reports: dict[tuple[Any, ...], QualityReport] = {}
        self._network: LpipsNetwork | None = None
        self._lpips_state: tuple[LpipsWeights | None, str | None] | None = None

    # -- what callers ask for --------------------------------------------------------

    def compare_many(self, comparisons: Sequence[Comparison]) -> list[QualityReport]:
        """The report of every comparison, in order; each file is decoded once for all of them.

        Raises
        ------
        UsageError
            A path does not name a readable file, or the LPIPS device is unusable.
        """
        pairs = [self._pair(c) for c in comparisons]
        todo = {pair.key: pair for pair in pairs if pair.key not in self._reports}
        fresh = list(todo.values())
        groups = [[fresh[i] for i in group] for group in components((p.base.sha256, p.cand.sha256) for p in fresh)]
        expected = [_expected_frames(group) for group in groups]
        total = sum(n for n in expected if n is not None) if None not in expected else 0
        done = 0
        for group, frames in zip(groups, expected, strict=True):
            self._frames = (done, total)
            decoded = self._run_group(group)
            done += frames if frames is not None else decoded
            self._tell_frames(done)
        return [self._reports[pair.key] for pair in pairs]

    def _tell_frames(self, done: int) -> None:
        if self.on_frames is not None:
            self.on_frames(done, self._frames[1] or None)

    def pending(self, comparisons: Sequence[Comparison]) -> int:
        """How many distinct comparisons :meth:`compare_many` would still have to run."""
        return len({self._pair(c).key for c in comparisons} - self._reports.keys())

    def probed(self, path: _PathLike, role: str = "output") -> Probed:
        """The file's probe (from an earlier comparison's decode when there was one)."""
        file = self._file(path)
        if file.info is None and file.error is None:
            self._decode_alone(file)
        return file.probed(role)

    def digest(self, path: _PathLike) -> media.DecodedDigest:
        """SHA-256 of the file's decoded frames and PCM (from an earlier decode when there was one)."""
        file = self._file(path)
        if file.digest is None:
            file.digest = media.decoded_digest(file.path)
        return file.digest

    # -- files and pairs ----------------------------------------------------------------

    def _file(self, path: _PathLike) -> _File:
        name = require_readable(path)
        if name not in self._files:
            self._files[name] = _File(name, sha256_file(name).hexdigest, os.path.getsize(name))
        return self._files[name]

    def _pair(self, comparison: Comparison) -> _Pair:
        base, cand = self._file(comparison.baseline), self._file(comparison.candidate)
        key = (base.path, base.sha256, cand.path, cand.sha256, comparison.expect_seconds)
        return _Pair(comparison, key, base, cand)

    def _decode_alone(self, file: _File) -> None:
        try:
            file.info = media.probe(file.path)
        except MediaDecodeError as exc:
            file.error = str(exc)

    # -- LPIPS --------------------------------------------------------------------------

    def _lpips_weights(self) -> tuple[LpipsWeights | None, str | None]:
        """The weights, or why LPIPS is not measured; authenticated on first use."""
        if self._lpips_state is None:
            settings = self.lpips
            if not settings.measure:
                self._lpips_state = (None, "LPIPS not measured (--no-lpips, measure_lpips=False)")
            elif settings.weights is not None:
                self._lpips_state = (settings.weights, None)
            else:
                from h3bench.metrics.lpips_weights import authenticate_weights

                try:
                    self._lpips_state = (authenticate_weights(settings.directory), None)
                except WeightIntegrityError as exc:
                    self._lpips_state = (None, (
                        f"LPIPS not measured: weights refused ({exc}); path {exc.path}, "
                        f"expected sha256 {exc.expected_sha256 or '-'}, actual {exc.actual_sha256 or '-'}"))
        return self._lpips_state

    def _lpips_network(self) -> LpipsNetwork:
        if self._network is None:
            from h3bench.metrics.lpips import network

            weights, _ = self._lpips_weights()
            assert weights is not None
            self._network = network(weights, self.lpips.device)
        return self._network

    # -- one group ------------------------------------------------------------------------

    def _run_group(self, pairs: list[_Pair]) -> int:
        """Compare one group of pairs that share files; the number of frames it decoded (every file's)."""
        files = list({id(f): f for p in pairs for f in (p.base, p.cand)}.values())
        weights, _ = self._lpips_weights()
        lpips_files = {id(f) for p in pairs for f in (p.base, p.cand)} if weights is not None else set()
        seconds = {id(f): {p.comparison.expect_seconds for p in pairs if f in (p.base, p.cand)} for f in files}
        depth = max(4, _PREFETCH_FRAMES // len(files))  # a pair decodes further ahead, riding out scheduling gaps
        threads = decoder_threads([f.size for f in files])
        streams = {id(f): prefetch(self._decode(f, rgb=id(f) in lpips_files, seconds=seconds[id(f)], threads=n),
                                   depth, name=f"decode {f.path}")
                   for f, n in zip(files, threads, strict=True)}
        with contextlib.ExitStack() as stack:
            for stream in streams.values():
                stack.enter_context(contextlib.closing(stream))
            walked = self._stream(pairs, files, streams, lpips=weights is not None)
        try:
            for pair in pairs:
                self._reports[pair.key] = self._report(pair, weights)
        finally:
            for f in files:
                f.pcm = None
                f.spectra.clear()
        return walked

    def _decode(
        self, file: _File, *, rgb: bool, seconds: set[float | None], threads: int
    ) -> Generator[media.DecodedFrame | _End, None, None]:
        """Runs on the file's own thread: its frames, then one :class:`_End`.

        One pass over the file's packets (:class:`~h3bench.media.MediaReader`)
        decodes the video and, between its frames, the audio. Once the PCM is
        whole, its spectra are computed here, when all of the file's pairs
        trim it alike, beside the other files' threads doing the same. The PCM
        is kept to the end of the group.
        """
        try:
            reader = media.MediaReader(file.path, rgb=rgb, hash_planes=self.digests, threads=threads)
            yield from reader
        except MediaDecodeError as exc:
            yield _End(None, str(exc))
            return
        info = reader.info
        assert info is not None
        yield _End(info, None, reader.pcm, reader.sha256, _file_spectra(reader.pcm, info.audio, seconds))

    def _stream(self, pairs: list[_Pair], files: list[_File], streams: dict[int, Any], *, lpips: bool) -> int:
        """Read every file's frames in lockstep and feed them to every pair they belong to; the frames decoded.

        Progress counts decoded frames, every file's: a frame index of a
        group costs about its number of files (the decode and AlexNet pass of
        each; one Gram matrix serves all of its pairs), so a rate in these
        units holds from one group to the next.
        """
        from h3bench.metrics.ssim_psnr import VideoComparison

        for pair in pairs:
            pair.video = VideoComparison(pair.base.path, pair.cand.path)
        live = {id(f): f for f in files}
        index = decoded = 0
        while live:
            frames: dict[int, media.DecodedFrame] = {}
            for key, file in list(live.items()):
                item = next(streams[key])
                if isinstance(item, _End):
                    self._finish(file, item)
                    del live[key]
                else:
                    frames[key] = item
            if not frames:  # every stream has ended: no frame index here
                break
            both = [p for p in pairs if id(p.base) in frames and id(p.cand) in frames]
            for pair in both:
                if pair.video_error is None:
                    assert pair.video is not None
                    try:
                        pair.video.add(frames[id(pair.base)].yuv, frames[id(pair.cand)].yuv)
                    except MediaShapeError as exc:
                        pair.video_error = str(exc)
            if lpips:
                self._lpips_step([p for p in both if p.lpips_error is None], frames, index)
            index += 1
            decoded += len(frames)
            self._tell_frames(self._frames[0] + decoded)
        return decoded

    def _finish(self, file: _File, end: _End) -> None:
        file.info, file.error, file.pcm = end.info, end.error, end.pcm
        if end.spectra is not None:
            file.spectra[end.spectra[0]] = end.spectra[1]
        if self.digests and end.error is None:
            pcm = media.pcm_sha256(end.pcm) if end.pcm is not None else None
            file.digest = media.DecodedDigest(end.video_sha256, pcm)

    def _lpips_step(self, pairs: list[_Pair], frames: dict[int, media.DecodedFrame], index: int) -> None:
        """One frame index: AlexNet once per distinct frame of these pairs, then every pair's heads."""
        from h3bench.metrics.lpips import FeatureBatch, frames_per_pass

        scored: list[_Pair] = []
        parent: dict[int, int] = {}  # files whose frames are equal share one file's features

        def rep(key: int) -> int:
            while key in parent:
                key = parent[key]
            return key

        for pair in pairs:
            a, b = frames[id(pair.base)].rgb, frames[id(pair.cand)].rgb
            assert a is not None and b is not None
            if a.shape != b.shape:
                pair.lpips_error = (f"frame sizes differ at frame {index}: baseline {pair.base.path} is "
                                    f"{a.shape[1]}x{a.shape[0]}, candidate {pair.cand.path} is {b.shape[1]}x{b.shape[0]}")
            elif _same(a, b):
                pair.lpips.append(0.0)  # identical frames: identical features, a zero difference
                first, second = rep(id(pair.base)), rep(id(pair.cand))
                if first != second:
                    parent[second] = first
            else:
                scored.append(pair)
        if not scored:
            return
        net = self._lpips_network()
        by_shape: dict[tuple[int, ...], list[_Pair]] = {}
        for pair in scored:
            by_shape.setdefault(frames[id(pair.base)].rgb.shape, []).append(pair)  # type: ignore[union-attr]
        for (height, width, _), group in by_shape.items():
            keys = list(dict.fromkeys(rep(k) for p in group for k in (id(p.base), id(p.cand))))
            step = frames_per_pass(height, width)
            batch = FeatureBatch.concat([net.features(np.stack([frames[k].rgb for k in keys[i:i + step]]))  # type: ignore[misc]
                                         for i in range(0, len(keys), step)])
            row = {key: i for i, key in enumerate(keys)}
            values = net.distances(batch, [row[rep(id(p.base))] for p in group], [row[rep(id(p.cand))] for p in group])
            for pair, value in zip(group, values, strict=True):
                pair.lpips.append(float(value))

    # -- reports ----------------------------------------------------------------------------

    def _report(self, pair: _Pair, weights: LpipsWeights | None) -> QualityReport:
        _, reason = self._lpips_weights()
        base, cand = pair.base, pair.cand
        video: Any = pair.video_error
        if video is None and pair.video is not None:
            try:
                video = pair.video.result()
            except MediaShapeError as exc:
                video = str(exc)
        lpips: Any = pair.lpips_error
        if lpips is None and weights is not None and pair.lpips:
            from h3bench.metrics.lpips import result_of

            lpips = result_of(np.array(pair.lpips), self._lpips_network())
        pcm = (base.pcm, cand.pcm) if base.pcm is not None and cand.pcm is not None else None
        measured = Measured(
            video=video,
            lpips=lpips,
            lpips_unmeasured=reason,
            lpips_weights=weights.source.to_dict() if weights is not None else None,
            pcm=pcm,
            audio=(lambda nb, nc: self._audio_metrics(base, cand, nb, nc)) if pcm is not None else None,
        )
        return assemble(base.probed("baseline"), cand.probed("candidate"), measured,
                        thresholds=self.thresholds, expect_seconds=pair.comparison.expect_seconds)

    def _audio_metrics(self, base: _File, cand: _File, base_count: int, cand_count: int) -> tuple[float, float]:
        from h3bench.metrics import audio

        assert base.pcm is not None and cand.pcm is not None and base.info and cand.info
        assert base.info.audio is not None and cand.info.audio is not None
        b, c = audio.trim_to(base.pcm, base_count), audio.trim_to(cand.pcm, cand_count)
        b, c = audio.comparable(b, c, baseline_rate=base.info.audio.sample_rate,
                                candidate_rate=cand.info.audio.sample_rate)
        for file, count, pcm in ((base, base_count, b), (cand, cand_count, c)):
            if count not in file.spectra:
                file.spectra[count] = audio.spectra(pcm)
        return audio.spectra_cosine(base.spectra[base_count], cand.spectra[cand_count]), audio.rms_ratio(b, c)


def decoder_threads(sizes: Sequence[int], cores: int | None = None) -> list[int]:
    """Decoder threads for each of a group's files (0: libavcodec's choice), from their sizes in bytes.

    The group's files are read in lockstep, so the heaviest one sets the pace
    and a lighter one only has to keep up. A file whose share of the group's
    bytes is under ``_ONE_THREAD_SHARE`` of a core decodes on one thread:
    frame threads would only add their hand-offs to its CPU time, which the
    other files' decoders need (``benchmarks/bench_compare.py``'s 40/60 pair
    on 2 cores, 15 interleaved rounds: 0.13 s less wall time and 0.2 s less
    CPU for ``compare``). The others get libavcodec's choice.
    """
    cores = cores if cores is not None else _usable_cores()
    total = sum(sizes)
    if total <= 0:
        return [0] * len(sizes)
    return [1 if size / total * cores < _ONE_THREAD_SHARE else 0 for size in sizes]


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _file_spectra(
    pcm: np.ndarray | None, audio: media.AudioInfo | None, seconds: set[float | None]
) -> tuple[int, Spectra] | None:
    """A file's spectra, computed once, when every pair it is in trims its audio to the same count."""
    if pcm is None or audio is None or len(seconds) != 1:
        return None
    (expect,) = seconds
    return _spectra_of(pcm, audio_trim_count(audio, expected_shape(expect) if expect is not None else None))


def _spectra_of(pcm: np.ndarray, count: int) -> tuple[int, Spectra] | None:
    """The spectra of ``pcm`` trimmed to ``count`` samples, when the spectral cosine could use them."""
    from h3bench.metrics import audio

    if pcm.ndim != 2 or pcm.dtype.kind != "f" or not 1 + max(audio.N_FFTS) // 2 <= count <= pcm.shape[1]:
        return None
    trimmed = pcm[:, :count].astype(np.float32, copy=False)  # a view: each channel row stays contiguous
    return (count, audio.spectra(trimmed)) if np.isfinite(trimmed).all() else None


def _expected_frames(pairs: Sequence[_Pair]) -> int | None:
    """The frames a group decodes when every pair says its duration: each of its files' expected count."""
    expect: dict[str, float] = {}
    for pair in pairs:
        if pair.comparison.expect_seconds is None:
            return None
        for file in (pair.base, pair.cand):
            expect[file.path] = pair.comparison.expect_seconds
    return sum(frame_count(seconds) for seconds in expect.values())


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Byte equality, rejecting most differing frames on their first row."""
    return bool(np.array_equal(a[0], b[0]) and np.array_equal(a, b))
