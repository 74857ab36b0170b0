"""STFT magnitudes kept in memory for short audio and in temporary files for long audio, so memory stays bounded.

Ten minutes of stereo audio has about 900 MB of magnitudes over the three
resolutions; upstream's formula holds them all. Here each resolution is
computed a few hundred STFT frames at a time and stored in the frequency ×
time order that ``torch.stft(...).flatten()`` gives: in an array when the
waveform's magnitudes fit ``_IN_MEMORY_BYTES`` (H3's 5 s and 15 s clips
need 8 and 23 MB), in a file otherwise. Two passes then read each one in
chunks:

- the norm, in torch's order of float32 operations (8 lanes, one after
  another within each lane, then the lanes in order and the tail last),
  carried from chunk to chunk so that it equals the whole-array norm bit for
  bit: keeping that order keeps upstream's values (identical 15 s audio
  scores about 1.0007, not 1);
- the dot product of the two unit vectors, summed per chunk in float32 as
  ``F.cosine_similarity`` sums them, the chunks' sums in float64 (within
  1e-6 of one float32 sum over the whole array).

The files live in a temporary directory, made only when a waveform needs
one, that is removed when its :class:`SpectrumFiles` is garbage-collected
(the quality engine drops a file's spectra once its group's reports are
made). Both stores give the same bits: the chunks are the same.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

__all__ = ["SpectrumFile", "SpectrumFiles", "dot", "write_spectra"]

# STFT frames per FFT call: 2 MB of windowed frames at n_fft 2048. Larger calls are not faster, and their
# temporaries fault in fresh pages every time; smaller ones cost more calls.
_FRAMES_PER_CHUNK = 256
_VALUES_PER_READ = 1 << 22  # float32 values per read (16 MB); a multiple of the 8 lanes
_IN_MEMORY_BYTES = 64 << 20  # a waveform's magnitudes up to this size stay in memory (about 40 s of stereo)
_NORM_LANES = 8  # torch's float32 vector_norm on CPU
_SQUARES_PER_STEP = 1 << 15  # values squared at a time for the norm (128 kB, in cache); a multiple of the lanes
_COSINE_EPS = np.float32(1e-12)


@dataclass(frozen=True, eq=False)
class SpectrumFile:
    """One channel's magnitudes at one ``n_fft``: ``length`` float32 values, and torch's norm of them.

    They are in ``values`` when kept in memory, else in the file at ``path``.
    """

    path: str | None
    length: int
    norm: np.float32
    values: np.ndarray | None = None


class SpectrumFiles:
    """The magnitudes of one waveform, (n_fft, channel) in order; in files of their own directory if ``on_disk``."""

    def __init__(self, *, on_disk: bool = True) -> None:
        self.directory: str | None = None
        if on_disk:
            self.directory = tempfile.mkdtemp(prefix="h3bench-spectra-")
            weakref.finalize(self, shutil.rmtree, self.directory, ignore_errors=True)
        self.files: list[SpectrumFile] = []

    def add(self, magnitudes_by_chunk: Iterable[np.ndarray], freqs: int, frames: int) -> None:
        """Store one channel's magnitudes, given as ``[freqs, frames]`` chunks over time, and record its norm."""
        length = freqs * frames
        if self.directory is None:
            values = np.empty((freqs, frames), dtype=np.float32)
            start = 0
            for chunk in magnitudes_by_chunk:
                values[:, start:start + chunk.shape[1]] = chunk
                start += chunk.shape[1]
            flat = values.reshape(-1)
            self.files.append(SpectrumFile(None, length, _torch_norm(_slices(flat), length), flat))
            return
        path = os.path.join(self.directory, f"{len(self.files)}.f32")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, length * 4)
            start = 0
            for chunk in magnitudes_by_chunk:
                for row in range(freqs):  # row f of the flattened [freqs, frames] array starts at f * frames
                    os.pwrite(fd, np.ascontiguousarray(chunk[row]).data, (row * frames + start) * 4)
                start += chunk.shape[1]
        finally:
            os.close(fd)
        self.files.append(SpectrumFile(path, length, _torch_norm(_read(path), length)))


def write_spectra(pcm: np.ndarray, n_ffts: tuple[int, ...], window_of: Callable[[int], np.ndarray]) -> SpectrumFiles:
    """The magnitudes of float32 ``[channels, samples]`` PCM at each ``n_fft`` (``window_of(n_fft)``)."""
    shapes = [(n_fft, n_fft // 2 + 1, 1 + pcm.shape[1] // (n_fft // 4)) for n_fft in n_ffts]
    size = 4 * len(pcm) * sum(freqs * frames for _, freqs, frames in shapes)
    files = SpectrumFiles(on_disk=size > _IN_MEMORY_BYTES)
    scratch = _Scratch(min(_FRAMES_PER_CHUNK, max(frames for _, _, frames in shapes)), max(n_ffts))
    for n_fft, freqs, frames in shapes:
        window, hop = window_of(n_fft), n_fft // 4
        for channel in pcm:
            files.add(_magnitude_chunks(channel, n_fft, hop, window, frames, scratch), freqs, frames)
    return files


class _Scratch:
    """The buffers of one FFT call, made once per waveform for its largest ``n_fft``: fresh ones for every
    channel and resolution would fault in new pages each time (a quarter of the spectra's time).

    numpy's rfft of float32 computes in float64 and rounds to complex64; doing the same into these buffers
    gives the same bits.
    """

    def __init__(self, rows: int, n_fft: int) -> None:
        self.windowed = np.empty(rows * n_fft, np.float64)
        self.spectrum = np.empty(rows * (n_fft // 2 + 1), np.complex128)
        self.rounded = np.empty(rows * (n_fft // 2 + 1), np.complex64)
        self.magnitude = np.empty(rows * (n_fft // 2 + 1), np.float32)

    def shaped(self, rows: int, n_fft: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        bins = n_fft // 2 + 1
        return (self.windowed[:rows * n_fft].reshape(rows, n_fft), self.spectrum[:rows * bins].reshape(rows, bins),
                self.rounded[:rows * bins].reshape(rows, bins), self.magnitude[:rows * bins].reshape(rows, bins))


def _magnitude_chunks(
    channel: np.ndarray, n_fft: int, hop: int, window: np.ndarray, frames: int, scratch: _Scratch
) -> Iterator[np.ndarray]:
    """``torch.stft(..., center=True, pad_mode="reflect").abs()`` of one channel, ``[freqs, frames]`` in time chunks.

    Each chunk is overwritten by the next one: the caller stores it first.

    Each frame's FFT is the same computation whatever the chunk, so the
    chunks are the whole-array magnitudes, split. Only the chunks at either
    end are reflect-padded (from a slice long enough to reflect as the whole
    channel would), so no padded copy of the channel is made.
    """
    half, samples = n_fft // 2, len(channel)
    windowed, spectrum, rounded, magnitude = scratch.shaped(min(_FRAMES_PER_CHUNK, frames), n_fft)
    for first in range(0, frames, _FRAMES_PER_CHUNK):
        last = min(first + _FRAMES_PER_CHUNK, frames)
        low, high = first * hop, (last - 1) * hop + n_fft  # in the padded signal, which starts `half` earlier
        start, stop = max(0, low - half - n_fft), min(samples, high - half + n_fft)
        left, right = (half if start == 0 else 0), (half if stop == samples else 0)
        piece = np.pad(channel[start:stop], (left, right), mode="reflect") if left or right else channel[start:stop]
        offset = start + half - left  # the padded signal's index of piece[0]
        segment = piece[low - offset:high - offset]
        n = last - first
        np.multiply(np.lib.stride_tricks.sliding_window_view(segment, n_fft)[::hop], window, out=windowed[:n])
        np.fft.rfft(windowed[:n], axis=-1, out=spectrum[:n])
        rounded[:n] = spectrum[:n]
        yield np.abs(rounded[:n], out=magnitude[:n]).T  # valid until the next chunk is asked for


def _chunks(file: SpectrumFile) -> Iterator[np.ndarray]:
    if file.values is not None:
        return _slices(file.values)
    assert file.path is not None
    return _read(file.path)


def _slices(values: np.ndarray) -> Iterator[np.ndarray]:
    for start in range(0, len(values), _VALUES_PER_READ):
        yield values[start:start + _VALUES_PER_READ]


def _read(path: str) -> Iterator[np.ndarray]:
    with open(path, "rb") as f:
        while chunk := f.read(_VALUES_PER_READ * 4):
            yield np.frombuffer(chunk, dtype=np.float32)


def _torch_norm(chunks: Iterable[np.ndarray], length: int) -> np.float32:
    """``torch.linalg.vector_norm`` of ``length`` float32 values, given in chunks, in torch's order of operations on CPU."""
    lanes = np.zeros(_NORM_LANES, dtype=np.float32)
    head = length // _NORM_LANES * _NORM_LANES
    tail: list[np.float32] = []
    # Reducing axis 0 of a C-ordered array adds row after row. The carried lanes are the first row of every
    # step (0 + x is x), and the squares of a few thousand rows the others: no temporary of a chunk's size.
    step = np.empty(_NORM_LANES + _SQUARES_PER_STEP, dtype=np.float32)
    seen = 0
    for values in chunks:
        body = values[:max(0, min(len(values), head - seen))]
        tail += list(np.square(values[len(body):]))
        for start in range(0, len(body), _SQUARES_PER_STEP):
            part = body[start:start + _SQUARES_PER_STEP]
            step[:_NORM_LANES] = lanes
            np.square(part, out=step[_NORM_LANES:_NORM_LANES + len(part)])
            lanes = np.add.reduce(step[:_NORM_LANES + len(part)].reshape(-1, _NORM_LANES), axis=0, dtype=np.float32)
        seen += len(values)
    total = np.float32(0.0)
    for value in [*lanes, *tail]:
        total = np.float32(total + value)
    return np.sqrt(total)


def dot(a: SpectrumFile, b: SpectrumFile) -> float:
    """The cosine of two magnitude files: the float32 products of their unit vectors, summed."""
    scale_a, scale_b = np.maximum(a.norm, _COSINE_EPS), np.maximum(b.norm, _COSINE_EPS)
    total = 0.0
    for x, y in zip(_chunks(a), _chunks(b), strict=True):
        total += float(np.sum((x / scale_a) * (y / scale_b), dtype=np.float32))
    return total
