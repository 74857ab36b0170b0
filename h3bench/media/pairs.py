"""Two videos' frames in lockstep, for the metrics that compare a candidate's output with the baseline's frame by frame.

Each file is decoded on its own thread, a few frames ahead
(:mod:`h3bench.media.prefetch`), so both decode while the frames before are
scored. Nothing is truncated: when one video ends before the other, the
pairing stops with a :class:`~h3bench.errors.MediaShapeError` that names
both frame counts.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Generator, Iterator
from typing import TypeVar

from h3bench.errors import MediaShapeError
from h3bench.media.prefetch import prefetch

__all__ = ["frame_count_error", "paired_frames"]

_Frame = TypeVar("_Frame")
_PathLike = str | os.PathLike[str]


def frame_count_error(baseline: _PathLike, candidate: _PathLike, base_count: int, cand_count: int) -> MediaShapeError:
    return MediaShapeError(
        f"frame counts differ: baseline {os.fspath(baseline)} has {base_count} frames, "
        f"candidate {os.fspath(candidate)} has {cand_count}",
        path=os.fspath(candidate),
    )


def paired_frames(
    baseline: _PathLike, candidate: _PathLike, frames: Callable[[_PathLike], Iterator[_Frame]], *, ahead: int
) -> Generator[tuple[int, _Frame, _Frame], None, None]:
    """Each frame index with the baseline's and the candidate's frame, as ``frames`` decodes each file.

    ``ahead``: decoded frames held ahead per file. Raises
    :class:`~h3bench.errors.MediaShapeError` when the frame counts differ
    (the longer file is counted to its end for the message).
    """
    left = prefetch(frames(baseline), ahead, name=f"decode {os.fspath(baseline)}")
    right = prefetch(frames(candidate), ahead, name=f"decode {os.fspath(candidate)}")
    with contextlib.closing(left), contextlib.closing(right):
        for index, (first, second) in enumerate(itertools.zip_longest(left, right)):
            if first is None or second is None:
                longer = left if second is None else right
                total = index + 1 + sum(1 for _ in longer)
                raise frame_count_error(baseline, candidate, *((total, index) if second is None else (index, total)))
            yield index, first, second
