"""The SSIM and PSNR kernel in numba, for installs built without a C compiler.

:mod:`h3bench.metrics.ssim_psnr` scores each plane with the compiled kernel
(``_ssim_kernel.c``) when the install built it, and with this one otherwise.
Both give the same bits (tests_unit/metrics/test_ssim_kernels.py). This one costs
about half a second of numba start-up per process, with the GIL held, even
with its compiled code cached on disk.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["C1", "C2", "plane_stats"]

# x264's constants for 8x8 windows, scaled by the window's 64 pixels (vf_ssim.c).
C1 = int(0.01 * 0.01 * 255 * 255 * 64 + 0.5)
C2 = int(0.03 * 0.03 * 255 * 255 * 64 * 63 + 0.5)


@numba.njit(nogil=True, cache=True)
def plane_stats(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """One plane's SSIM (mean over its 8x8 windows) and its sum of squared differences.

    One pass over the rows: column sums over the 4 rows of a block row, then
    block sums, then the windows between this block row and the previous one.
    The GIL is released, so decoding threads keep running.
    """
    h, w = a.shape
    bh, bw = h >> 2, w >> 2
    cw = 4 * bw
    col1 = np.zeros(cw, np.int32)
    col2 = np.zeros(cw, np.int32)
    colss = np.zeros(cw, np.int32)
    col12 = np.zeros(cw, np.int32)
    prev = np.zeros((4, bw), np.int32)
    cur = np.zeros((4, bw), np.int32)
    ratios = np.zeros(max(bw - 1, 1), np.float32)
    lanes = np.zeros(8, np.float64)
    ssim = np.float64(0.0)
    sse = np.int64(0)
    for y in range(h):
        ra, rb = a[y], b[y]
        row_sse = np.int64(0)
        for x in range(w):
            d = np.int32(ra[x]) - np.int32(rb[x])
            row_sse += d * d
        sse += row_sse
        if y >= 4 * bh:
            continue  # rows past the last whole block row are in no window
        for x in range(cw):
            p, q = np.int32(ra[x]), np.int32(rb[x])
            col1[x] += p
            col2[x] += q
            colss[x] += p * p + q * q
            col12[x] += p * q
        if y & 3 != 3:
            continue
        for bx in range(bw):
            i = 4 * bx
            cur[0, bx] = col1[i] + col1[i + 1] + col1[i + 2] + col1[i + 3]
            cur[1, bx] = col2[i] + col2[i + 1] + col2[i + 2] + col2[i + 3]
            cur[2, bx] = colss[i] + colss[i + 1] + colss[i + 2] + colss[i + 3]
            cur[3, bx] = col12[i] + col12[i + 1] + col12[i + 2] + col12[i + 3]
        col1[:] = 0
        col2[:] = 0
        colss[:] = 0
        col12[:] = 0
        if y >= 7:
            # The row's windows in float64, in the compiled kernel's order: eight lanes (window i in
            # lane i % 8) over the whole groups of eight, the lanes pairwise, then the rest in order.
            n = bw - 1
            whole = n - n % 8
            lanes[:] = 0.0
            for bx in range(n):
                s1 = np.int64(prev[0, bx] + prev[0, bx + 1] + cur[0, bx] + cur[0, bx + 1])
                s2 = np.int64(prev[1, bx] + prev[1, bx + 1] + cur[1, bx] + cur[1, bx + 1])
                ss = np.int64(prev[2, bx] + prev[2, bx + 1] + cur[2, bx] + cur[2, bx + 1])
                s12 = np.int64(prev[3, bx] + prev[3, bx + 1] + cur[3, bx] + cur[3, bx + 1])
                var = ss * 64 - s1 * s1 - s2 * s2
                covar = s12 * 64 - s1 * s2
                num = np.float32(2 * s1 * s2 + C1) * np.float32(2 * covar + C2)
                den = np.float32(s1 * s1 + s2 * s2 + C1) * np.float32(var + C2)
                ratios[bx] = num / den
            for i in range(whole):
                lanes[i % 8] += np.float64(ratios[i])
            row = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
            for i in range(whole, n):
                row += np.float64(ratios[i])
            ssim += row
        prev, cur = cur, prev
    return float(ssim / ((bw - 1) * (bh - 1))), int(sse)

