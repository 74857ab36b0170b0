"""The compiled SSIM kernel (h3bench/metrics/_ssim_kernel.c); everything else is in pyproject.toml.

It is optional: where no C compiler is found, h3bench installs without it and
scores SSIM and PSNR with the numba kernel, to the same bits, only slower to
start (h3bench/metrics/ssim_psnr.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "h3bench.metrics._ssim_kernel",
            ["h3bench/metrics/_ssim_kernel.c"],
            # -ffp-contract=off: no fused multiply-add, so the float32 rounding is ffmpeg's on every CPU.
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        )
    ]
)
