"""tune's study in process, without training: a resumed study and two processes sharing one never draw the same
settings, a corrupted study.db is one error line, the library leaves Optuna's log level and matplotlib's backend to
its caller, and params.png's colour bar sits beside the panels."""

from __future__ import annotations

import logging
import random

import pytest

from tests.test_tune import FLAGS

optuna = pytest.importorskip("optuna", reason="tune needs Optuna (the [tune] extra)")

from ernie_ft.tuning.space import Param, Space  # noqa: E402
from ernie_ft.tuning.study import StudySettings, open_study  # noqa: E402

SPACE = Space(
    [Param("lr", "train", "float", 1e-5, 1e-2, log=True), Param("warmup", "train", "choice", choices=[0, 0.1])], None
)
SEARCH = {"task": "classify", "metric": "accuracy", "space": "lr=1e-05..0.01:log,warmup=0|0.1"}


def _call(out, sampler: str = "tpe"):
    """A study as one tune call (one process) opens it: its own sampler, seeded as --seed 42 seeds it."""
    return open_study(StudySettings(str(out), sampler=sampler, sampler_seed=42), SEARCH, "maximize")[0]


def _trial(study) -> dict:
    trial = study.ask()
    params = SPACE.suggest(trial)
    study.tell(trial, random.random())
    return params


def _distinct(drawn: list[dict]) -> int:
    return len({tuple(sorted(p.items())) for p in drawn})


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_a_resumed_study_never_draws_the_same_settings_again(sampler, tmp_path):
    first = _call(tmp_path, sampler)
    drawn = [_trial(first) for _ in range(3)]
    resumed = _call(tmp_path, sampler)  # the same command again: a sampler of its own, the same seed
    drawn += [_trial(resumed) for _ in range(3)]
    assert _distinct(drawn) == 6, drawn


def test_two_processes_sharing_a_study_never_draw_the_same_settings(tmp_path):
    one, other = _call(tmp_path), _call(tmp_path)  # two machines starting on one --storage, taking turns
    drawn = [_trial(study) for _ in range(3) for study in (one, other)]
    drawn += [_trial(one)]  # the first's own next trial, once the other has drawn
    assert _distinct(drawn) == 7, drawn


def test_the_same_seed_draws_the_same_search(tmp_path):
    """Seeded by the trial's number: a search is still reproducible from --sampler-seed."""
    runs = []
    for name in ("a", "b"):
        study = _call(tmp_path / name, "random")
        runs.append([_trial(study) for _ in range(3)])
    assert runs[0] == runs[1]


def test_a_corrupted_study_db_is_one_error_line_naming_it(tmp_path, capsys):
    from ernie_ft.cli import main

    out = tmp_path / "search"
    out.mkdir()
    (out / "study.db").write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)
    status = main(["tune", "classify", *FLAGS, "--output", str(out), "--trials", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert (
        err[0].startswith(f"error: {out / 'study.db'}: Optuna cannot read it as a study (")
        and "Traceback" not in err[0]
    )
    assert "move it away to start a new study there" in err[0]


def test_the_library_leaves_optunas_log_level_to_its_caller(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.DEBUG)
    try:
        _call(tmp_path)
        assert optuna.logging.get_verbosity() == optuna.logging.DEBUG
    finally:
        optuna.logging.set_verbosity(logging.INFO)


def test_the_pictures_leave_matplotlibs_backend_to_the_caller(tmp_path):
    import matplotlib

    from ernie_ft.tuning import report

    study = _call(tmp_path)
    _trial(study)
    before = matplotlib.get_backend()
    matplotlib.use("svg")  # a caller's own choice
    try:
        assert report.draw(study, "accuracy", str(tmp_path)) == [
            str(tmp_path / report.HISTORY),
            str(tmp_path / report.PARAMS),
        ]
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)


def test_params_png_has_its_colour_bar_beside_the_panels_not_over_one(tmp_path):
    import matplotlib.pyplot as plt

    from ernie_ft.tuning import report

    study = _call(tmp_path)
    for _ in range(5):
        _trial(study)
    figure = report.params_figure(study, "accuracy")
    try:
        figure.canvas.draw()
        (bar,) = [ax for ax in figure.axes if ax.get_ylabel() == "Trial"]
        panels = [ax for ax in figure.axes if ax is not bar]
        assert len(panels) == 2 and all(ax.get_position().x1 <= bar.get_position().x0 for ax in panels)
    finally:
        plt.close(figure)
