"""PNG plots for reports: training curves and confusion matrices.

matplotlib is imported inside the functions so that importing this module stays cheap. Figures are
drawn on an Agg canvas without pyplot: no display is needed, no global backend is switched under a
caller's notebook, and no figure stays registered in pyplot's state after saving.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings

import numpy as np

from ernie_ft.evaluation import lower_is_better

# Font family names (as matplotlib reports them) that cover Chinese, most preferred first.
CJK_FONT_NAMES = (
    "Noto Sans CJK",
    "Noto Serif CJK",
    "WenQuanYi",
    "SimHei",
    "Source Han",
    "Droid Sans Fallback",
    "AR PL",
)
# The same fonts as they appear in file names, for fonts installed after matplotlib built its cache.
_CJK_FILE_KEYS = ("notosanscjk", "notoserifcjk", "wqy", "simhei", "sourcehan", "droidsansfallback", "uming", "ukai")


NOT_DRAWN = "not drawn: matplotlib is not installed (pip install 'ernie_ft[evaluate]')"
"""What a report says instead of a picture's path in the runtime install, which has no matplotlib."""


def can_draw() -> bool:
    """Whether matplotlib is installed: ``evaluate`` in the runtime install writes its metrics without pictures."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _known_cjk_font() -> str | None:
    from matplotlib import font_manager

    # Simplified-Chinese faces first: the JP/KR/TC ones draw some hanzi with other glyph shapes.
    names = sorted(
        {font.name for font in font_manager.fontManager.ttflist}, key=lambda name: (not name.endswith("SC"), name)
    )
    for wanted in CJK_FONT_NAMES:
        for name in names:
            if wanted.lower() in name.lower():
                return name
    return None


@functools.cache
def find_cjk_font() -> str | None:
    """Name of an installed font family that can draw Chinese, or None when there is none."""
    from matplotlib import font_manager

    font = _known_cjk_font()
    if font is None:
        # matplotlib caches its font list once, so a font installed later is only visible on disk.
        # Add every matching file so that the regular weight is found, not just the first file.
        for path in font_manager.findSystemFonts():
            if any(key in os.path.basename(path).lower() for key in _CJK_FILE_KEYS):
                with contextlib.suppress(OSError, RuntimeError, ValueError):
                    font_manager.fontManager.addfont(path)
        font = _known_cjk_font()
    return font


@contextlib.contextmanager
def _chinese_text():
    """Draw Chinese with a CJK font if one exists; otherwise silence the missing-glyph warnings."""
    import matplotlib

    font = find_cjk_font()
    with warnings.catch_warnings():
        if font is None:
            # Without a CJK font the labels show as boxes but the numbers still render.
            warnings.filterwarnings("ignore", message=r"Glyph .* missing from", category=UserWarning)
            yield
        else:
            with matplotlib.rc_context({"font.family": ["sans-serif", font]}):
                yield


def _new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: str) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path


def smooth(values, span: float) -> np.ndarray:
    """An exponential moving average of ``values`` (weight 2 / (span + 1) on each new value), debiased as Adam's
    moments are: the first point is the first value, and a constant series stays that constant."""
    values = np.asarray(values, dtype=np.float64)
    weight = 2.0 / (span + 1.0)
    out, average = np.empty_like(values), 0.0
    for i, value in enumerate(values):
        average = (1 - weight) * average + weight * value
        out[i] = average / (1 - (1 - weight) ** (i + 1))
    return out


def smoothing_span(points: int) -> float:
    """The EMA span for a loss curve of ``points`` logged values: a tenth of them, at least 2."""
    return max(2.0, points / 10)


def plot_training_curves(history: list[dict], path: str, metric: str) -> str:
    """Plot training loss and the dev metric against step.

    In: `history` records in time order, each {"step", "loss"} (a training-loss log) or
    {"step", "split": "dev", <metric>: float, ...} (an evaluation); `metric` names the dev value.
    Out: writes a PNG at `path` (loss panel on top, each logged loss faint and their EMA bold (``smooth``), dev
    panel below with the best point marked;
    either panel is left out when it has no records) and returns `path`.
    """
    train = [
        (r["step"], r["loss"]) for r in history if r.get("split", "train") == "train" and r.get("loss") is not None
    ]
    dev = [(r["step"], r[metric]) for r in history if r.get("split") == "dev" and r.get(metric) is not None]
    panels = int(bool(train)) + int(bool(dev)) or 1
    with _chinese_text():
        figure = _new_figure(7.5, 1.0 + 2.8 * panels)
        axes = list(figure.subplots(panels, 1, sharex=True, squeeze=False)[:, 0])
        parts = (["training loss"] if train else []) + ([f"dev {metric}"] if dev else [])
        title = " and ".join(parts) or "training curves"
        figure.suptitle(title[0].upper() + title[1:])
        best_step = None
        if dev:
            steps, values = map(np.asarray, zip(*dev))
            best = int(np.argmin(values) if lower_is_better(metric) else np.argmax(values))
            best_step = steps[best]
            ax = axes[-1]
            ax.plot(steps, values, marker="o", markersize=3, color="tab:orange", label=f"dev {metric}")
            ax.plot(
                [best_step],
                [values[best]],
                marker="*",
                markersize=14,
                color="tab:red",
                linestyle="none",
                label=f"best {values[best]:.4f} @ step {best_step}",
            )
            ax.set_ylabel(f"dev {metric}")
            ax.legend(loc="best", fontsize=8)
        if train:
            steps, values = map(np.asarray, zip(*train))
            ax = axes[0]
            # each point is one batch's loss, noisy (length-grouped batches differ): the trend is its EMA
            ax.plot(steps, values, color="tab:blue", alpha=0.3, linewidth=1, label="training loss (one batch)")
            span = smoothing_span(len(values))
            ax.plot(steps, smooth(values, span), color="tab:blue", linewidth=2, label=f"EMA (span {span:g} logs)")
            ax.set_ylabel("training loss")
            ax.legend(loc="best", fontsize=8)
        if not train and not dev:
            axes[0].text(0.5, 0.5, "no records", ha="center", va="center", transform=axes[0].transAxes)
        for ax in axes:
            ax.grid(True, alpha=0.3)
            if best_step is not None:
                ax.axvline(best_step, color="tab:red", linestyle=":", linewidth=1)
        axes[-1].set_xlabel("step")
        return _save(figure, path)


def plot_confusion_matrix(names: list[str], matrix, path: str, title: str = "Confusion matrix") -> str:
    """Draw a confusion matrix as a heat map.

    In: class `names`, a square count `matrix` (rows = gold, columns = predicted, as from
    ernie_ft.evaluation.classification.confusion), the PNG `path` and a title.
    Out: writes the PNG (colour = share of the gold row, each cell shows its count and row %)
    and returns `path`.
    """
    counts = np.asarray(matrix, dtype=np.int64)
    n = len(names)
    if counts.shape != (n, n):
        raise ValueError(f"matrix has shape {counts.shape} but there are {n} names")
    row_totals = counts.sum(axis=1, keepdims=True)
    share = np.divide(counts, row_totals, out=np.zeros(counts.shape), where=row_totals > 0)
    total = int(counts.sum())
    accuracy = np.trace(counts) / total if total else 0.0
    side = min(3.0 + 0.5 * n, 18.0)
    # Shrink text as classes are added so that 30 classes still fit in their cells.
    cell_size = max(6.0, min(10.0, 200.0 / max(n, 1)))
    tick_size = max(7.0, min(10.0, 260.0 / max(n, 1)))
    with _chinese_text():
        figure = _new_figure(side + 1.8, side + 0.8)
        ax = figure.add_subplot()
        image = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
        figure.colorbar(image, ax=ax, shrink=0.8, label="share of gold row")
        for i, j in np.ndindex(n, n):
            text = f"{counts[i, j]}\n{share[i, j]:.0%}" if counts[i, j] else "0"
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=cell_size,
                color="white" if share[i, j] > 0.6 else ("black" if counts[i, j] else "0.6"),
            )
        ax.set_xticks(
            range(n),
            labels=names,
            fontsize=tick_size,
            rotation=45 if n > 3 else 0,
            ha="right" if n > 3 else "center",
            rotation_mode="anchor",
        )
        ax.set_yticks(range(n), labels=names, fontsize=tick_size)
        ax.set_xlabel("predicted")
        ax.set_ylabel("gold")
        ax.set_title(f"{title}\n{total} examples, accuracy {accuracy:.1%}")
        return _save(figure, path)


def plot_series(
    series: dict[str, list[tuple[float, float]]],
    path: str,
    xlabel: str,
    ylabel: str,
    title: str,
    reference: tuple[str, float] | None = None,
) -> str:
    """Overlay several runs' curves on one axis, e.g. held-out masked accuracy against tokens seen.

    In: `series` maps a run's name to its (x, y) points (a run with no points is listed in the legend
    as such); the PNG `path`, axis labels and title; `reference` an optional (label, y) drawn as a
    dashed horizontal line (a baseline such as the unigram model's accuracy).
    Out: writes the PNG (each run's last point is annotated with its value) and returns `path`.
    """
    with _chinese_text():
        figure = _new_figure(7.5, 4.2)
        ax = figure.add_subplot()
        for name, points in series.items():
            if not points:
                ax.plot([], [], label=f"{name} (no points)")
                continue
            xs, ys = map(np.asarray, zip(*sorted(points)))
            (line,) = ax.plot(xs, ys, marker="o", markersize=3, label=name)
            ax.annotate(
                f"{ys[-1]:.3f}",
                (xs[-1], ys[-1]),
                textcoords="offset points",
                xytext=(4, 0),
                fontsize=8,
                color=line.get_color(),
                va="center",
            )
        if reference is not None:
            label, value = reference
            ax.axhline(value, color="0.4", linestyle="--", linewidth=1, label=f"{label} {value:.3f}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        if series or reference is not None:
            ax.legend(loc="best", fontsize=8)
        else:
            ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes)
        return _save(figure, path)
