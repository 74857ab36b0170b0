/* One plane's SSIM and sum of squared differences, as ffmpeg's ssim and psnr filters compute them.
 *
 * The same arithmetic as numba's kernel (ssim_numba.py; ssim_psnr.py's
 * docstring gives the formula), compiled when h3bench is installed (setup.py):
 * it loads in microseconds where numba takes about half a second per process,
 * and its loops vectorise (the block sums by hand in AVX2, where the CPU has it).
 * The two give the same bits (tests_unit/metrics/test_ssim_kernels.py; planes under 16
 * pixels wide take the scalar block sums alone, wider ones both).
 *
 * Only the Python buffer protocol is used, so numpy's headers are not needed
 * to build it. The GIL is released while a plane is scored.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* On x86-64, AVX-512 and AVX2 copies of the kernel too; the loader picks the best the CPU runs. */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
#endif
#ifndef KERNEL_CLONES
#define KERNEL_CLONES
#endif

/* The helpers are inlined into each copy, so that they are compiled for its instruction set. */
#define HELPER static inline __attribute__((always_inline))

#define C1 416     /* int(.01² · 255² · 64 + .5), vf_ssim.c */
#define C2 235963  /* int(.03² · 255² · 64 · 63 + .5) */

/* Every integer below fits an int32: a window sums 64 samples of at most 255, so Σa ≤ 16320,
 * 64·Σ(a²+b²) ≤ 532684800 and |2·covar + C2| < 2³¹. So the loops run on 32-bit lanes. */

/* Column sums over the 4 rows of a block row: Σa, Σb, Σ(a²+b²) and Σab of each column. */
HELPER void column_sums(const uint8_t *a, Py_ssize_t sa, const uint8_t *b, Py_ssize_t sb, Py_ssize_t cw,
                        int32_t *restrict c1, int32_t *restrict c2, int32_t *restrict css, int32_t *restrict c12)
{
    for (Py_ssize_t x = 0; x < cw; x++) {
        /* 16-bit operands with 32-bit products: what SSE2's pmaddwd and AVX2's vpmaddwd compute. */
        int16_t p0 = a[x], p1 = a[sa + x], p2 = a[2 * sa + x], p3 = a[3 * sa + x];
        int16_t q0 = b[x], q1 = b[sb + x], q2 = b[2 * sb + x], q3 = b[3 * sb + x];
        c1[x] = (int16_t)(p0 + p1 + p2 + p3);
        c2[x] = (int16_t)(q0 + q1 + q2 + q3);
        css[x] = (int32_t)p0 * p0 + (int32_t)p1 * p1 + (int32_t)p2 * p2 + (int32_t)p3 * p3 + (int32_t)q0 * q0 +
                 (int32_t)q1 * q1 + (int32_t)q2 * q2 + (int32_t)q3 * q3;
        c12[x] = (int32_t)p0 * q0 + (int32_t)p1 * q1 + (int32_t)p2 * q2 + (int32_t)p3 * q3;
    }
}

/* Block sums: each 4 neighbouring columns of one of the column-sum arrays. */
HELPER void block_sums(const int32_t *restrict column, Py_ssize_t bw, int32_t *restrict block)
{
    for (Py_ssize_t bx = 0; bx < bw; bx++)
        block[bx] = column[4 * bx] + column[4 * bx + 1] + column[4 * bx + 2] + column[4 * bx + 3];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_BLOCKS 1

/* The block sums of one block row, four blocks (16 columns) at a time, in AVX2 (as vf_ssim.c's x86 code
 * does): 16-bit samples, vpmaddwd for the squares and products and for adding neighbouring columns.
 * The same integers as column_sums then block_sums, whose scalar loop does the blocks left over. */
__attribute__((target("avx2"))) static Py_ssize_t block_row_avx2(const uint8_t *a, Py_ssize_t sa, const uint8_t *b,
                                                                 Py_ssize_t sb, Py_ssize_t bw, int32_t *sums)
{
    const __m256i ones = _mm256_set1_epi16(1);
    int32_t sum[8], square[8];
    Py_ssize_t bx = 0;
    for (; bx + 4 <= bw; bx += 4) {
        __m256i sa16 = _mm256_setzero_si256(), sb16 = _mm256_setzero_si256();
        __m256i sq = _mm256_setzero_si256(), cross = _mm256_setzero_si256();
        for (int r = 0; r < 4; r++) {
            __m256i p = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(a + r * sa + 4 * bx)));
            __m256i q = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b + r * sb + 4 * bx)));
            sa16 = _mm256_add_epi16(sa16, p); /* at most 4 · 255 per column */
            sb16 = _mm256_add_epi16(sb16, q);
            sq = _mm256_add_epi32(sq, _mm256_add_epi32(_mm256_madd_epi16(p, p), _mm256_madd_epi16(q, q)));
            cross = _mm256_add_epi32(cross, _mm256_madd_epi16(p, q));
        }
        /* Column pairs, then within each 128-bit half: [Σa blk0, blk1, Σb blk0, blk1 | Σa blk2, blk3, Σb ...]. */
        __m256i sums_ab = _mm256_hadd_epi32(_mm256_madd_epi16(sa16, ones), _mm256_madd_epi16(sb16, ones));
        __m256i sums_sq = _mm256_hadd_epi32(sq, cross);
        _mm256_storeu_si256((__m256i *)sum, sums_ab);
        _mm256_storeu_si256((__m256i *)square, sums_sq);
        for (int k = 0; k < 2; k++) {
            for (int half = 0; half < 2; half++) {
                sums[bx + 2 * half + k] = sum[4 * half + k];
                sums[bw + bx + 2 * half + k] = sum[4 * half + 2 + k];
                sums[2 * bw + bx + 2 * half + k] = square[4 * half + k];
                sums[3 * bw + bx + 2 * half + k] = square[4 * half + 2 + k];
            }
        }
    }
    return bx;
}
#endif

/* Each window's SSIM between two block rows ([4][bw] sums each), as vf_ssim.c rounds it: float32 products. */
HELPER void window_row(const int32_t *prev, const int32_t *cur, Py_ssize_t bw, float *restrict out)
{
    for (Py_ssize_t bx = 0; bx + 1 < bw; bx++) {
        int32_t s1 = prev[bx] + prev[bx + 1] + cur[bx] + cur[bx + 1];
        int32_t s2 = prev[bw + bx] + prev[bw + bx + 1] + cur[bw + bx] + cur[bw + bx + 1];
        int32_t ss = prev[2 * bw + bx] + prev[2 * bw + bx + 1] + cur[2 * bw + bx] + cur[2 * bw + bx + 1];
        int32_t s12 = prev[3 * bw + bx] + prev[3 * bw + bx + 1] + cur[3 * bw + bx] + cur[3 * bw + bx + 1];
        int32_t var = ss * 64 - s1 * s1 - s2 * s2;
        int32_t covar = s12 * 64 - s1 * s2;
        float num = (float)(2 * s1 * s2 + C1) * (float)(2 * covar + C2);
        float den = (float)(s1 * s1 + s2 * s2 + C1) * (float)(var + C2);
        out[bx] = num / den;
    }
}

HELPER int64_t squared_error(const uint8_t *a, Py_ssize_t sa, const uint8_t *b, Py_ssize_t sb, Py_ssize_t w,
                             Py_ssize_t rows)
{
    int64_t sse = 0;
    for (Py_ssize_t y = 0; y < rows; y++) {
        const uint8_t *ra = a + y * sa, *rb = b + y * sb;
        for (Py_ssize_t x0 = 0; x0 < w; x0 += 32768) { /* 32768 · 255² still fits an int32 */
            Py_ssize_t x1 = x0 + 32768 < w ? x0 + 32768 : w;
            int32_t part = 0;
            for (Py_ssize_t x = x0; x < x1; x++) {
                int32_t d = (int32_t)ra[x] - (int32_t)rb[x];
                part += d * d;
            }
            sse += part;
        }
    }
    return sse;
}

/* The sum of one row's window values in float64: eight lanes (window i in lane i % 8) over the whole
 * groups of eight, the lanes pairwise, then the rest in order. One fixed order, which numba's kernel
 * repeats; a single running sum would be a chain of dependent additions, a third of the kernel's time. */
HELPER double row_sum(const float *values, Py_ssize_t n)
{
    double lanes[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    Py_ssize_t whole = n - n % 8;
    for (Py_ssize_t i = 0; i < whole; i += 8)
        for (int k = 0; k < 8; k++)
            lanes[k] += (double)values[i + k];
    double sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    for (Py_ssize_t i = whole; i < n; i++)
        sum += (double)values[i];
    return sum;
}

/* 0, or -1 when out of memory. */
KERNEL_CLONES static int plane_stats(const uint8_t *a, Py_ssize_t sa, const uint8_t *b, Py_ssize_t sb, Py_ssize_t w, Py_ssize_t h,
                       double *ssim_mean, int64_t *sse)
{
    Py_ssize_t bw = w >> 2, bh = h >> 2, cw = 4 * bw;
    int32_t *buffer = malloc(sizeof(int32_t) * (4 * (size_t)cw + 8 * (size_t)bw) + sizeof(float) * (size_t)bw);
    if (buffer == NULL)
        return -1;
    int32_t *columns = buffer, *prev = buffer + 4 * cw, *cur = prev + 4 * bw;
    float *ratios = (float *)(cur + 4 * bw);
    double total = 0.0;
    int64_t error = 0;
#ifdef HAVE_AVX2_BLOCKS
    int avx2 = __builtin_cpu_supports("avx2");
#endif
    for (Py_ssize_t by = 0; by < bh; by++) {
        const uint8_t *ra = a + 4 * by * sa, *rb = b + 4 * by * sb;
        Py_ssize_t done = 0; /* blocks already summed */
#ifdef HAVE_AVX2_BLOCKS
        if (avx2)
            done = block_row_avx2(ra, sa, rb, sb, bw, cur);
#endif
        if (done < bw) {
            Py_ssize_t x0 = 4 * done, rest = bw - done;
            column_sums(ra + x0, sa, rb + x0, sb, 4 * rest, columns, columns + cw, columns + 2 * cw, columns + 3 * cw);
            for (int k = 0; k < 4; k++)
                block_sums(columns + k * cw, rest, cur + k * bw + done);
        }
        error += squared_error(ra, sa, rb, sb, w, 4);
        if (by > 0) {
            window_row(prev, cur, bw, ratios);
            total += row_sum(ratios, bw - 1);
        }
        int32_t *swap = prev;
        prev = cur;
        cur = swap;
    }
    free(buffer);
    *ssim_mean = total / (double)((bw - 1) * (bh - 1));
    *sse = error + squared_error(a + 4 * bh * sa, sa, b + 4 * bh * sb, sb, w, h - 4 * bh);
    return 0;
}

/* A 2-D uint8 buffer whose rows are contiguous, or an exception. */
static int get_plane(PyObject *obj, Py_buffer *view, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_STRIDES | PyBUF_FORMAT) < 0)
        return -1;
    if (view->ndim != 2 || view->itemsize != 1 || (view->format && strcmp(view->format, "B") != 0) ||
        view->strides[1] != 1 || view->strides[0] < view->shape[1]) {
        PyErr_Format(PyExc_ValueError, "plane %s must be 2-D uint8 with contiguous rows", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *py_plane_stats(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *oa, *ob;
    Py_buffer a, b;
    if (!PyArg_ParseTuple(args, "OO:plane_stats", &oa, &ob))
        return NULL;
    if (get_plane(oa, &a, "a") < 0)
        return NULL;
    if (get_plane(ob, &b, "b") < 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t h = a.shape[0], w = a.shape[1];
    if (b.shape[0] != h || b.shape[1] != w) {
        PyErr_SetString(PyExc_ValueError, "planes differ in shape");
    } else if (h < 8 || w < 8) {
        PyErr_SetString(PyExc_ValueError, "a plane needs at least one 8x8 window");
    } else {
        double ssim = 0.0;
        int64_t sse = 0;
        int status;
        Py_BEGIN_ALLOW_THREADS
        status = plane_stats(a.buf, a.strides[0], b.buf, b.strides[0], w, h, &ssim, &sse);
        Py_END_ALLOW_THREADS
        result = status < 0 ? PyErr_NoMemory() : Py_BuildValue("(dL)", ssim, (long long)sse);
    }
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return result;
}

static PyMethodDef methods[] = {
    {"plane_stats", py_plane_stats, METH_VARARGS,
     "plane_stats(a, b) -> (ssim, sse): one plane's mean SSIM over its 8x8 windows and its sum of squared "
     "differences; a and b are 2-D uint8 buffers of one shape, at least 8x8, with contiguous rows."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ssim_kernel", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ssim_kernel(void) { return PyModule_Create(&module); }
