# The compiled SSIM kernel (_ssim_kernel.c), built by setup.py when a C compiler is found.
import numpy as np

def plane_stats(a: np.ndarray, b: np.ndarray, /) -> tuple[float, int]: ...
