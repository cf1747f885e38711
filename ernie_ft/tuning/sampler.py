"""A study's sampler that never draws the same trial twice: each trial draws from a generator of its own, seeded by
``--sampler-seed`` and the trial's number in the study.

A sampler seeded once per process repeats itself: a resumed study (the same command again) or a second machine on
the study built it with the same seed, and its first random draws were those of the first call (trials 5-7 of a
resumed search ran the settings of trials 1-3). A trial's number is given by the study's storage, once in the whole
study whichever process or machine asks, so seeding by it keeps every trial's draws apart, and a search is still
reproducible: the same seed draws the same trial N from the same history. What the sampler learns from the trials
before (TPE's model of the good and the bad settings) it reads from the study itself, as before.
"""

from __future__ import annotations

import secrets
import threading
from typing import Optional

import numpy as np
import optuna

KINDS = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler}
"""``--sampler``'s choices: each takes ``seed=``."""


def trial_seed(seed: int, number: int) -> int:
    """The seed of trial ``number`` of a search seeded ``seed``: apart for every pair (``numpy``'s ``SeedSequence``
    mixes them; seed 42's trial 1 is not seed 43's trial 0)."""
    return int(np.random.SeedSequence([seed % 2**63, number]).generate_state(1)[0])


class PerTrialSampler(optuna.samplers.BaseSampler):
    """Optuna's sampler ``kind`` (tpe or random), built for each trial with ``trial_seed(seed, trial.number)``; a
    random seed for the search when ``seed`` is None. Threads of one process (``--workers``) may share it."""

    def __init__(self, kind: str, seed: Optional[int]):
        self.kind = kind
        self.seed = secrets.randbits(63) if seed is None else seed
        self._samplers: dict[int, optuna.samplers.BaseSampler] = {}
        self._lock = threading.Lock()

    def _of(self, trial) -> optuna.samplers.BaseSampler:
        with self._lock:
            if trial.number not in self._samplers:
                self._samplers[trial.number] = KINDS[self.kind](seed=trial_seed(self.seed, trial.number))
            return self._samplers[trial.number]

    def infer_relative_search_space(self, study, trial):
        return self._of(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._of(trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._of(trial).sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        self._of(trial).before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self._of(trial).after_trial(study, trial, state, values)
        with self._lock:  # its draws are over
            self._samplers.pop(trial.number, None)

    def reseed_rng(self) -> None:
        """A new random seed for the trials to come (Optuna calls it where processes were forked)."""
        with self._lock:
            self.seed = secrets.randbits(63)
