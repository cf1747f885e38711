"""The Optuna study of a search: where it is stored, its sampler and pruner, which trials count towards
``--trials``, and trial 0 (the flags as given).

A study is created once and found again by every later call with the same storage and name, on this machine or
another; what it searches (task, metric, space) is recorded in it, so a call that would mix another search into it
is refused.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Optional

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
    prune_warmup: float = 0.0
    """Epochs of its own a trial trains before any pruner may stop it (its first evaluations are not judged)."""
    heartbeat: int = 60
    """Seconds between a running trial's heartbeats in the study; a trial silent for twice as long (its ``tune`` was
    killed, or its machine lost) is failed by the next call on the study, and its parameters run again."""

    def url(self) -> str:
        return self.storage or f"sqlite:///{os.path.abspath(os.path.join(self.output, STUDY_FILE))}"

    def study_name(self) -> str:
        return self.name or os.path.basename(os.path.abspath(self.output))


def report_step(epochs: float) -> int:
    """An evaluation's step as reported to Optuna: hundredths of an epoch, so that trials of other batch sizes (other
    optimizer steps per epoch) are compared by the pruner after the same amount of data."""
    return round(epochs * 100)


def _sampler(settings: StudySettings):
    """``--sampler`` seeded per trial (``sampler.PerTrialSampler``): no call, process or machine on the study draws
    what another drew."""
    from ernie_ft.tuning.sampler import PerTrialSampler

    return PerTrialSampler(settings.sampler, settings.sampler_seed)


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
    warmup = report_step(settings.prune_warmup)
    if name == "threshold":
        bound = float(value)
        side = {"lower": bound} if direction == "maximize" else {"upper": bound}
        return optuna.pruners.ThresholdPruner(**side, n_warmup_steps=warmup)
    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=settings.prune_after, n_warmup_steps=warmup)
    if settings.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=warmup or "auto")
    return optuna.pruners.NopPruner()


def open_study(settings: StudySettings, search: dict, direction: str):
    """(The study at ``settings``' storage and name, its ``Heartbeat``): created, or loaded when it exists and
    ``search`` (task, metric, space: what it records) is the same; UserError for a storage Optuna cannot open (a
    corrupted study.db too) or another search's study."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    if settings.storage is None:
        os.makedirs(settings.output, exist_ok=True)
    try:
        storage = _storage(settings)
        study = optuna.create_study(
            storage=storage,
            study_name=settings.study_name(),
            sampler=_sampler(settings),
            pruner=_pruner(settings, direction),
            direction=direction,
            load_if_exists=True,
        )
        _check_search(study, settings, search, direction)
        with warnings.catch_warnings():  # Optuna calls the function experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        heartbeat = Heartbeat(storage, storage.get_study_id_from_name(study.study_name)) if _beats(storage) else None
    except (ImportError, ValueError, optuna.exceptions.StorageInternalError, SQLAlchemyError) as e:
        reason = " ".join(str(getattr(e, "orig", None) or e).split("\n")[0].split())
        if settings.storage is None:
            path = os.path.join(settings.output, STUDY_FILE)
            raise UserError(
                f"{path}: Optuna cannot read it as a study ({reason}); move it away to start a new study there, or "
                "give another --output"
            ) from None
        raise UserError(f"--storage {settings.url()}: Optuna cannot open it ({reason})") from None
    return study, heartbeat or Heartbeat()


def _check_search(study, settings: StudySettings, search: dict, direction: str) -> None:
    """Record ``search`` in a new study; refuse another search's study, warn for another space."""
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


def _storage(settings: StudySettings):
    """A database storage with heartbeats (``StudySettings.heartbeat``), or the URL of any other for Optuna to open."""
    import optuna

    url = settings.url()
    if not url.startswith(("sqlite:", "postgresql", "mysql")):
        return url
    with warnings.catch_warnings():  # Optuna calls heartbeats experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(
            url,
            heartbeat_interval=settings.heartbeat,
            grace_period=2 * settings.heartbeat,
            heartbeat_stale_trial_callback=_run_again,
        )


def _beats(storage) -> bool:
    """Whether ``storage`` (``_storage``'s) keeps heartbeats."""
    return not isinstance(storage, str) and bool(storage.get_heartbeat_interval())


def _run_again(study, trial) -> None:
    """A trial whose heartbeats stopped: failed by Optuna; its parameters queued to run again, as Ctrl-C's are."""
    study.enqueue_trial(trial.params, user_attrs={"again": trial.number})
    print(
        f"note: trial {trial.number} was running without a heartbeat (its tune was killed or its machine lost): "
        "marked failed; its parameters run again",
        file=sys.stderr,
    )


@dataclass
class Heartbeat:
    """A study's heartbeats: its storage (one that keeps them, else None) and the study's id in it."""

    storage: Any = None
    study_id: Optional[int] = None

    def beat(self, trial) -> Optional[float]:
        """Record ``trial``'s heartbeat now; the seconds between heartbeats, None where the storage keeps none.
        Called as soon as the trial is asked for: a trial never beaten is never found stale."""
        if self.storage is None:
            return None
        self.storage.record_heartbeat(self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number))
        return self.storage.get_heartbeat_interval()

    @contextlib.contextmanager
    def beating(self, trial):
        """While the block runs, record ``trial``'s heartbeat every interval (from a thread; nothing where the
        storage keeps none)."""
        interval = self.beat(trial)
        if not interval:
            yield
            return
        stop = threading.Event()

        def beats() -> None:
            while not stop.wait(interval):
                self.beat(trial)

        thread = threading.Thread(target=beats, name=f"heartbeat of trial {trial.number}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def counted(study) -> int:
    """The trials towards ``--trials``: finished (complete, pruned, failed by an error) or running; a trial
    stopped by a signal, or failed for its lost heartbeat, is not, as its parameters run again."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    return sum(t.state in done or (t.state == TrialState.FAIL and "error" in t.user_attrs) for t in trials)


def enqueue_given(study, params: dict) -> None:
    """Trial 0 runs the flags as given (``params``: their values of the searched settings), so a search never ends
    below the user's own settings; once per study (another machine may have queued it already)."""
    if not study.get_trials(deepcopy=False):
        study.enqueue_trial(params, user_attrs={"given": True}, skip_if_exists=True)


def running_elsewhere(study) -> int:
    """The study's trials marked running before this call started: another ``tune`` on the study (a killed one's
    are failed once their heartbeat is two intervals old: ``open_study``)."""
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
