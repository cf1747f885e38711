"""The Optuna study of a search: where it is stored, its sampler and pruner, which trials count towards
``--trials``, and trial 0 (the flags as given).

A study is created once and found again by every later call with the same storage and name, on this machine or
another; what it searches (task, metric, space) is recorded in it, so a call that would mix another search into it
is refused.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

from ernie_ft.errors import UserError

STUDY_FILE = "study.db"
INTERRUPTED = "interrupted"
"""The user attribute of a trial stopped by Ctrl-C or SIGTERM: failed, not counted, its parameters run again."""
PRUNERS = ("median", "hyperband", "none")
SAMPLERS = ("tpe", "random")


@dataclass
class StudySettings:
    """What names and shapes a study: storage, name, sampler, pruner."""

    output: str
    storage: str | None = None
    """An Optuna storage URL; None: sqlite:///OUTPUT/study.db."""
    name: str | None = None
    """None: the --output directory's name."""
    sampler: str = "tpe"
    sampler_seed: int | None = None
    pruner: str = "median"
    """median, hyperband, none or threshold:VALUE (``check_pruner``)."""
    prune_after: int = 3
    """Trials that finish before the median pruner prunes any."""

    def url(self) -> str:
        return self.storage or f"sqlite:///{os.path.abspath(os.path.join(self.output, STUDY_FILE))}"

    def study_name(self) -> str:
        return self.name or os.path.basename(os.path.abspath(self.output))


def _sampler(settings: StudySettings):
    import optuna

    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=settings.sampler_seed)
    return optuna.samplers.TPESampler(seed=settings.sampler_seed)


def check_pruner(pruner: str) -> None:
    """``--pruner``: median, hyperband, none or threshold:VALUE."""
    name, _, value = pruner.partition(":")
    try:
        valid = name in PRUNERS and not value or name == "threshold" and math.isfinite(float(value))
    except ValueError:
        valid = False
    if not valid:
        raise UserError(
            f"--pruner {pruner}: give median, hyperband, none or threshold:VALUE (a trial whose dev metric is "
            "worse than VALUE at an evaluation is pruned)"
        )


def _pruner(settings: StudySettings, direction: str):
    import optuna

    name, _, value = settings.pruner.partition(":")
    if name == "threshold":
        bound = float(value)
        return optuna.pruners.ThresholdPruner(**({"lower": bound} if direction == "maximize" else {"upper": bound}))
    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=settings.prune_after, n_warmup_steps=0)
    if settings.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner()
    return optuna.pruners.NopPruner()


def open_study(settings: StudySettings, search: dict, direction: str):
    """The study at ``settings``' storage and name: created, or loaded when it exists and ``search`` (task, metric,
    space: what it records) is the same; UserError for a storage Optuna cannot open or another search's study."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if settings.storage is None:
        os.makedirs(settings.output, exist_ok=True)
    try:
        study = optuna.create_study(
            storage=settings.url(),
            study_name=settings.study_name(),
            sampler=_sampler(settings),
            pruner=_pruner(settings, direction),
            direction=direction,
            load_if_exists=True,
        )
    except (ImportError, ValueError, optuna.exceptions.StorageInternalError) as e:
        raise UserError(f"--storage {settings.url()}: Optuna cannot open it ({e})") from None
    recorded = study.user_attrs
    for key, value in search.items():
        if key in recorded and recorded[key] != value and key != "space":
            raise UserError(
                f"the study {settings.study_name()!r} in {settings.url()} searches {key} {recorded[key]!r}, not "
                f"{value!r}: run with its settings to continue it, or choose another --output (or --study)"
            )
        if key not in recorded:
            study.set_user_attr(key, value)
    if recorded.get("space", search.get("space")) != search.get("space"):
        print(
            f"warning: the study {settings.study_name()!r} was searching --space {recorded['space']}; its next "
            f"trials search {search['space']}",
            file=sys.stderr,
        )
        study.set_user_attr("space", search["space"])
    if study.direction.name.lower() != direction:
        raise UserError(f"the study {settings.study_name()!r} is to {study.direction.name.lower()} its metric")
    return study


def counted(study) -> int:
    """The trials towards ``--trials``: finished (complete, pruned, failed by an error) or running; a trial
    stopped by a signal is not, as its parameters run again."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    return sum(t.state in done or (t.state == TrialState.FAIL and not t.user_attrs.get(INTERRUPTED)) for t in trials)


def enqueue_given(study, params: dict) -> None:
    """Trial 0 runs the flags as given (``params``: their values of the searched settings), so a search never ends
    below the user's own settings; once per study (another machine may have queued it already)."""
    if not study.get_trials(deepcopy=False):
        study.enqueue_trial(params, user_attrs={"given": True}, skip_if_exists=True)


def running_elsewhere(study) -> int:
    """The study's trials marked running before this call started: another ``tune`` on the study, or one that was
    killed (a SIGKILL leaves no time to mark them)."""
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
