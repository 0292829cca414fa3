"""PNG plots of workloads 1, 3 and 5 (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _label(r: dict[str, Any], sid: str) -> str:
    return str(r["systems"][sid].get("meta", {}).get("label", sid))


def w1(r: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 5))
    for sid, v in r["systems"].items():
        if "W1" in v:
            sizes = sorted(int(n) for n in v["W1"])
            ax.plot(
                sizes,
                [v["W1"][str(n)]["turn"]["median"] for n in sizes],
                marker="o",
                label=_label(r, sid),
            )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="stored history N (messages)",
        ylabel="ms per turn (median)",
        title="W1: one turn (save, save, fetch) as history grows",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "w1_turn.png", dpi=110)
    plt.close(fig)


def w3(r: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 5))
    for sid, v in r["systems"].items():
        if "W3" in v:
            series = v["W3"]["series_ms"]
            ax.plot(range(1, len(series) + 1), series, lw=1, label=_label(r, sid))
    ax.set(
        yscale="log",
        xlabel="turn",
        ylabel="critical-path ms per turn",
        title=f"W3: latency per turn, summarizer sleeping {r['params']['slow_sleep']} s",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "w3_latency.png", dpi=110)
    plt.close(fig)


def w5(r: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 5))
    for target, per in r["W5"].items():
        counts = sorted(int(w) for w in per)
        ax.plot(counts, [per[str(w)] for w in counts], marker="o", label=target)
    ax.axvline(r["machine"]["nproc"] or 1, color="grey", ls="--", lw=1, label="CPU cores")
    ax.set(
        xlabel="writer processes",
        ylabel="messages stored per second",
        title="W5: throughput on PostgreSQL",
        xticks=sorted({int(w) for p in r["W5"].values() for w in p}),
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "w5_throughput.png", dpi=110)
    plt.close(fig)


def draw(r: dict[str, Any], out: Path) -> None:
    if any("W1" in v for v in r["systems"].values()):
        w1(r, out)
    if any("W3" in v for v in r["systems"].values()):
        w3(r, out)
    if r.get("W5"):
        w5(r, out)
