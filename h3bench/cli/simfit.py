"""``h3bench sim fit BUNDLE... --out PROFILE.toml``: a simulator profile from sealed bundles (h3bench.plan.profilefit)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["run_fit"]


def run_fit(argv: list[str]) -> int:
    """Parse ``argv``, fit the profile and write it; the exit code."""
    parser = argparse.ArgumentParser(prog="h3bench sim fit",
                                     description="Fit a versioned simulator profile from sealed evidence bundles.")
    parser.add_argument("bundles", nargs="+", type=Path, metavar="BUNDLE", help="sealed bundles with 5 s and 15 s blocks")
    parser.add_argument("--out", required=True, type=Path, metavar="PROFILE.toml", help="where the profile is written")
    parser.add_argument("--arm", default="baseline", help="the arm whose requests are fitted (default: %(default)s)")
    parser.add_argument("--time-scale", dest="time_scale", type=float, default=1.0,
                        help="the written profile's time_scale; its seconds are the bundle's divided by it "
                             "(default: %(default)s)")
    args = parser.parse_args(argv)
    from h3bench.evidence.files import replace_atomic
    from h3bench.plan.profilefit import fit_profile, profile_toml

    result = fit_profile(args.bundles, arm=args.arm, time_scale=args.time_scale)
    replace_atomic(args.out, profile_toml(result).encode("utf-8"))
    print(f"h3bench: wrote {args.out} ({result.source}); run it with h3bench sim --profile {args.out} "
          "--profile-table sim")
    return 0
