"""``tune``: a search from the task's flags to its report (``python -m ernie_ft tune``; the command parses)."""

from __future__ import annotations

import os
import sys
from typing import Optional

from ernie_ft.config import RunConfig
from ernie_ft.errors import UserError
from ernie_ft.evaluation import lower_is_better
from ernie_ft.tuning import report
from ernie_ft.tuning.plan import Plan
from ernie_ft.tuning.runner import Runner, Search
from ernie_ft.tuning.space import default_space, parse_space, settings_of
from ernie_ft.tuning.study import StudySettings, check_pruner, counted, enqueue_given, open_study, running_elsewhere


def cores() -> int:
    """The cores this process may use (its affinity)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def tune(
    spec: str,
    task_cls,
    config: RunConfig,
    trials: int,
    space: Optional[str] = None,
    workers: int = 1,
    storage: Optional[str] = None,
    study: Optional[str] = None,
    pruner: str = "median",
    prune_after: int = 3,
    prune_warmup: float = 0.0,
    sampler: str = "tpe",
    sampler_seed: Optional[int] = None,
    heartbeat: int = 60,
):
    """Search the settings of the task ``spec`` (class ``task_cls``) from ``config`` (the flags as given, trial
    0's settings; ``config.train.output`` the search's directory) until its study holds ``trials`` trials, then
    write the report. Returns the best trial (None when none is complete). KeyboardInterrupt on Ctrl-C or SIGTERM,
    once the running trials are stopped and marked."""
    from ernie_ft.task import task_options

    output = config.train.output
    check_pruner(pruner)
    if not prune_warmup >= 0:  # NaN too
        raise UserError(f"--prune-warmup {prune_warmup}: give the epochs a trial trains before any pruning, 0 or more")
    if heartbeat < 1:
        raise UserError(f"--heartbeat {heartbeat}: give the seconds between a running trial's heartbeats, 1 or more")
    plan = Plan.from_config(spec, task_cls, config)
    spec_text = space or default_space(spec, config.model.model.startswith("scratch:"))
    parsed = parse_space(spec_text, settings_of(task_options(task_cls)), plan.config)
    parsed.params = [p.holding(plan.given(p.name)) for p in parsed.params]
    metric = plan.metric()
    direction = "minimize" if lower_is_better(metric) else "maximize"
    settings = StudySettings(
        output, storage, study, sampler, sampler_seed, pruner, prune_after, prune_warmup, heartbeat
    )
    searched = {"task": spec, "metric": metric, "space": ",".join(p.describe() for p in parsed.params)}
    the_study, beats = open_study(settings, searched, direction)
    enqueue_given(the_study, {p.name: plan.given(p.name) for p in parsed.params})
    elsewhere = running_elsewhere(the_study)
    if elsewhere:
        print(
            f"note: {elsewhere} trial(s) of the study are running elsewhere (another tune on it): they count towards "
            "--trials",
            file=sys.stderr,
        )
    threads = max(1, cores() // workers)
    print(
        f"tune {spec}: study {settings.study_name()!r} in {settings.url()}, {direction} dev {metric}; "
        f"{counted(the_study)} trial(s) so far, --trials {trials}; {workers} at once, {threads} threads each; "
        f"space {searched['space']}",
        file=sys.stderr,
    )
    os.makedirs(output, exist_ok=True)
    try:
        Runner(Search(plan, parsed, metric, the_study, beats, output, trials, workers, threads)).run()
    finally:
        best = finish(the_study, metric, spec, output)
    return best


def finish(study, metric: str, spec: str, output: str):
    """The report in ``output`` (also after Ctrl-C: what is done is shown); the best trial or None."""
    print(report.write_table(study, metric, output))
    best = report.best_trial(study)
    if best is None:
        print("no trial is complete yet: no best checkpoint", file=sys.stderr)
        return None
    link = report.link_best(best, output)
    recipe = report.write_recipe(best, spec, output)
    pictures = report.draw(study, metric, output)
    test = best.user_attrs.get("test")
    scores = " ".join(f"{k} {v:.4f}" for k, v in test.items()) if test else ""
    print(f"best: trial {best.number}, dev {metric} {best.value:.4f}" + (f"; test: {scores}" if test else ""))
    print(
        f"best checkpoint {link or '(on its machine)'}; recipe {recipe}; table {os.path.join(output, report.TABLE)}"
        + (f"; pictures {', '.join(pictures)}" if pictures else ""),
        file=sys.stderr,
    )
    return best
