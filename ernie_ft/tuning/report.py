"""What a search leaves in its directory at the end: ``trials.tsv`` (and the same table printed), ``best`` (the best
trial's best checkpoint), ``best.yaml`` (a ``--config`` recipe that trains it again), and the pictures
``history.png`` (the metric over the trials) and ``params.png`` (each parameter against the metric)."""

from __future__ import annotations

import os
import sys
import warnings

import yaml

from ernie_ft.models.model_dir import BEST

TABLE = "trials.tsv"
BEST_RECIPE = "best.yaml"
HISTORY = "history.png"
PARAMS = "params.png"


def _value(trial):
    """A trial's dev metric: its result, or for a pruned one its last evaluation's."""
    if trial.value is not None:
        return trial.value
    steps = trial.intermediate_values
    return steps[max(steps)] if steps else None


def _cell(value) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def trial_rows(study, metric: str) -> list[list[str]]:
    """The table of trials: number, each parameter, the dev metric (a pruned trial's last), state, seconds."""
    trials = [t for t in study.get_trials(deepcopy=False) if t.state.name != "WAITING"]
    names = sorted({name for t in trials for name in t.params})
    rows = [["trial", *names, f"dev {metric}", "state", "seconds"]]
    for t in trials:
        seconds = (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete else None
        state = t.state.name.lower() + (" (stopped)" if t.user_attrs.get("interrupted") else "")
        rows.append(
            [
                str(t.number),
                *(_cell(t.params.get(n)) for n in names),
                _cell(_value(t)),
                state,
                f"{seconds:.0f}" if seconds is not None else "",
            ]
        )
    return rows


def write_table(study, metric: str, output: str) -> str:
    """``trials.tsv``, and the same table as aligned text (returned, to print)."""
    rows = trial_rows(study, metric)
    with open(os.path.join(output, TABLE), "w", encoding="utf-8") as f:
        f.writelines("\t".join(row) + "\n" for row in rows)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def best_trial(study):
    """The best complete trial, or None."""
    return study.best_trial if any(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False)) else None


def link_best(trial, output: str) -> str | None:
    """``OUTPUT/best`` pointing at the best trial's ``best/`` (a relative symlink, swapped in whole); None with a
    line when that trial ran elsewhere (another machine on the same --storage) and its directory is not here."""
    target = os.path.join(trial.user_attrs["run_dir"], BEST)
    if not os.path.isdir(target):
        print(
            f"note: the best trial {trial.number} ran on {trial.user_attrs.get('host', 'another machine')}; its "
            f"checkpoint is {target} there",
            file=sys.stderr,
        )
        return None
    link, tmp = os.path.join(output, BEST), os.path.join(output, BEST + ".tmp")
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(os.path.relpath(target, output), tmp)
    os.replace(tmp, link)
    return link


def write_recipe(trial, spec: str, output: str) -> str:
    """``best.yaml``: the best trial's recipe, its first comment the command that trains it again."""
    path = os.path.join(output, BEST_RECIPE)
    command = (
        f"python -m ernie_ft {spec}" if "/" not in spec and ":" not in spec else f"python -m ernie_ft --task {spec}"
    )
    header = (
        f"# {command} --config {path} --output runs/best-again\n"
        f"#\n# The best trial ({trial.number}) of the search in {output}: dev {trial.value:.6g}.\n"
    )
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + yaml.safe_dump(trial.user_attrs["recipe"], allow_unicode=True, sort_keys=False))
    return path


def draw(study, metric: str, output: str) -> list[str]:
    """``history.png`` and ``params.png`` (Optuna's matplotlib pictures); [] before any trial is complete. Drawn
    with pyplot (Optuna's pictures are) on whatever backend the caller's process has; each figure is closed once
    saved."""
    from optuna.visualization import matplotlib as pictures

    if best_trial(study) is None:
        return []
    with warnings.catch_warnings():  # Optuna calls its matplotlib pictures experimental
        warnings.simplefilter("ignore")
        history = pictures.plot_optimization_history(study, target_name=f"dev {metric}").figure
    return [
        _save(history, os.path.join(output, HISTORY)),
        _save(params_figure(study, metric), os.path.join(output, PARAMS)),
    ]


def params_figure(study, metric: str):
    """Optuna's slice plot (each parameter against the dev metric, coloured by trial), its log axes labelled so that
    the labels do not run into each other. Not laid out again: ``tight_layout`` takes no account of the colour bar
    Optuna puts beside the panels, and laid the last panel under it; ``_save`` cuts the picture to what is drawn."""
    import numpy as np
    from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter
    from optuna.visualization import matplotlib as pictures

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        axes = np.ravel(pictures.plot_slice(study, target_name=f"dev {metric}"))
    for ax in axes:  # a log axis labels its minor ticks too (2x10^-4, 3x10^-4...), one over the other
        if ax.get_xscale() == "log":
            ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
            ax.xaxis.set_major_formatter(StrMethodFormatter("{x:.0e}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.tick_params(axis="x", labelrotation=45)
    return axes[0].figure


def _save(figure, path: str) -> str:
    import matplotlib.pyplot as plt

    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path
