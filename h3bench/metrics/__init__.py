"""Quality metrics with upstream's definitions: SSIM/PSNR (ffmpeg), LPIPS, audio."""
