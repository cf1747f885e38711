"""The chart at the top of docs/benchmarks.md: each table's headline ratios, one bar each, coloured by the CPU kind
the row ran on, drawn from the results files the benchmarks write (``results.py``, benchmarks/results/*.json);
1.0 is parity.

    python benchmarks/chart.py [--output docs/benchmarks.png]
"""

from __future__ import annotations

import argparse
import os

import results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLOURS = {"AVX2": "#4C72B0", "AVX-512, VNNI not recorded": "#8C8C8C", "AVX-512": "#55A868", "AVX-512 VNNI": "#DD8452"}
OTHER = "#C44E52"  # a CPU kind not in COLOURS (AMX, older)


def bars() -> list[tuple[str, float, str]]:
    """(label, ratio, CPU kind) per bar, in the results files' order: what the chart draws."""
    return [(row["comparison"], row["ratio"], row["cpu"]) for row in results.rows()]


def plot(path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = bars()
    kinds = list(dict.fromkeys(kind for _, _, kind in drawn))
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(drawn) + 1.4))
    shown = ax.barh(range(len(drawn)), [r for _, r, _ in drawn], color=[COLOURS.get(k, OTHER) for _, _, k in drawn])
    for bar, (_, ratio, _) in zip(shown, drawn):
        ax.text(bar.get_width() + 0.03, bar.get_y() + bar.get_height() / 2, f"{ratio:.2f}x", va="center", fontsize=9)
    ax.set_yticks(range(len(drawn)), [label for label, _, _ in drawn], fontsize=9)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("ernie_ft / the other stack, per second (> 1: ernie_ft is faster)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS.get(k, OTHER)) for k in kinds]
    fig.legend(handles, [f"CPU: {k}" for k in kinds], loc="lower center", ncol=len(kinds), fontsize=8, frameon=False)
    ax.set_xlim(0, max(r for _, r, _ in drawn) * 1.2)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default=os.path.join(ROOT, "docs", "benchmarks.png"))
    print(plot(parser.parse_args().output))


if __name__ == "__main__":
    main()
