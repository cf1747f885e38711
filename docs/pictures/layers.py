"""docs/layers.png: ernie_ft's subpackages in the layers of setup.cfg's import-linter contract, and which may import
which (a layer imports only the layers below it; the packages side by side in one layer do not import each other).

    python docs/pictures/layers.py [--output docs/layers.png]

The layers are read from setup.cfg, and written into the picture's PNG metadata (``Layers``, JSON) so that
tests/test_layout.py can tell when the picture no longer matches the contract.
"""

from __future__ import annotations

import argparse
import configparser
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "importlinter:contract:layers"


def layers(setup_cfg: Path = ROOT / "setup.cfg") -> list[list[str]]:
    """The layers contract's layers, top (the command line) first, each a list of the packages side by side."""
    config = configparser.ConfigParser()
    config.read(setup_cfg, encoding="utf-8")
    lines = [line.strip() for line in config[CONTRACT]["layers"].splitlines() if line.strip()]
    return [[name.strip() for name in line.split("|")] for line in lines]


def plot(output: Path, stack: list[list[str]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    width, row_height = 8.0, 0.55
    fig, ax = plt.subplots(figsize=(width, row_height * len(stack) + 1.0))
    ax.set_xlim(0, width)
    ax.set_ylim(-0.5, len(stack) * row_height + 0.2)
    ax.axis("off")
    for depth, row in enumerate(stack):
        y = (len(stack) - 1 - depth) * row_height
        box = (width - 1.6) / len(row)
        for i, name in enumerate(row):
            x = 0.2 + i * box
            colour = "#DD8452" if depth == 0 else ("#4C72B0" if len(row) > 1 else "#8FAADC")
            patch = FancyBboxPatch((x + 0.05, y + 0.06), box - 0.1, row_height - 0.14, boxstyle="round,pad=0.02")
            patch.set(facecolor=colour, edgecolor="none", alpha=0.9)
            ax.add_patch(patch)
            label = name + ("/" if (ROOT / "ernie_ft" / name).is_dir() else ".py")  # a subpackage or a module
            ax.text(x + box / 2, y + row_height / 2 - 0.01, label, ha="center", va="center", color="white", fontsize=9)
    top, bottom = (len(stack) - 0.3) * row_height, 0.2
    ax.annotate("", xy=(width - 0.7, bottom), xytext=(width - 0.7, top), arrowprops={"arrowstyle": "->", "lw": 1.5})
    ax.text(width - 0.55, (top + bottom) / 2, "imports\nonly\ndown", va="center", fontsize=8)
    ax.text(
        0.2,
        -0.35,
        "Side by side: independent (no imports between them). Only entry points (__main__) import cli/; "
        "models/ imports no data readers.",
        fontsize=7.5,
    )
    fig.tight_layout()
    fig.savefig(output, dpi=110, metadata={"Layers": json.dumps(stack), "Software": None})
    plt.close(fig)
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=str(ROOT / "docs" / "layers.png"))
    print(plot(Path(parser.parse_args().output), layers()))


if __name__ == "__main__":
    main()
