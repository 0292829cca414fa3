"""Summary statistics of timings (seconds in, milliseconds out)."""

from __future__ import annotations

import statistics

import numpy as np


def ms(values: list[float]) -> dict[str, float]:
    """Median, p90, p99, max and mean of ``values`` in milliseconds."""
    if not values:
        return {}
    arr = np.asarray(values) * 1000
    return {
        "median": float(np.median(arr)),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
        "max": float(arr.max()),
        "mean": float(statistics.fmean(arr)),
        "n": len(values),
    }
