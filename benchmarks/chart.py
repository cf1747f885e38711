"""The chart at the top of docs/benchmarks.md: each table's headline ratios, one bar each, coloured by the CPU kind
the row ran on. The figures are the tables' own (copied here when a table changes); 1.0 is parity.

    python benchmarks/chart.py [--output docs/benchmarks.png]
"""

from __future__ import annotations

import argparse
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FIGURES = [  # (table, comparison, ratio, CPU kind): "faster than" ratios, ernie_ft first
    ("Training", "nano / HF PyTorch", 1.64, "AVX-512 VNNI"),
    ("Training", "medium / HF PyTorch", 1.32, "AVX-512 VNNI"),
    ("Training", "nano / PaddleNLP", 2.77, "AVX-512 VNNI"),
    ("Prediction", "Paddle Inference / HF PyTorch", 2.16, "AVX-512 VNNI"),
    ("Pretraining", "MLM / HF PyTorch", 2.79, "AVX-512, VNNI not recorded"),
    ("Pretraining", "ELECTRA / HF PyTorch", 2.21, "AVX-512, VNNI not recorded"),
    ("Deployment", "int8 / Paddle Inference fp32, classify", 1.60, "AVX2, no VNNI"),
    ("Deployment", "int8 / Paddle Inference fp32, NER", 1.45, "AVX2, no VNNI"),
    ("Deployment", "int8 / optimum int8, classify", 1.07, "AVX2, no VNNI"),
    ("Deployment", "int8 / Paddle Inference fp32, classify", 2.19, "AVX-512 VNNI"),
    ("Deployment", "int8 / optimum int8, classify", 1.46, "AVX-512 VNNI"),
    ("Serving", "serve int8 / FastAPI + PaddleNLP, 32 clients", 3.39, "AVX2, no VNNI"),
    ("Serving", "serve int8 / FastAPI + PaddleNLP, 32 clients", 5.15, "AVX-512 VNNI"),
]
COLOURS = {"AVX2, no VNNI": "#4C72B0", "AVX-512, VNNI not recorded": "#8C8C8C", "AVX-512 VNNI": "#DD8452"}


def plot(path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = FIGURES
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(rows) + 1.4))
    labels = [f"{table}: {what}" for table, what, _, _ in rows]
    bars = ax.barh(range(len(rows)), [r[2] for r in rows], color=[COLOURS[r[3]] for r in rows])
    for bar, row in zip(bars, rows):
        ax.text(bar.get_width() + 0.03, bar.get_y() + bar.get_height() / 2, f"{row[2]:.2f}x", va="center", fontsize=9)
    ax.set_yticks(range(len(rows)), labels, fontsize=9)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("ernie_ft / the other stack, per second (> 1: ernie_ft is faster)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    fig.legend(handles, [f"CPU: {kind}" for kind in COLOURS], loc="lower center", ncol=3, fontsize=8, frameon=False)
    ax.set_xlim(0, max(r[2] for r in rows) * 1.2)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default=os.path.join(ROOT, "docs", "benchmarks.png"))
    print(plot(parser.parse_args().output))


if __name__ == "__main__":
    main()
