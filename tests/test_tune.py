"""``python -m ernie_ft tune``: a small study on the sample reviews (scratch:tiny, 1 epoch, trials on 2 workers),
continued to a larger count with a pruner that prunes every new trial, its best checkpoint predicting, its recipe
training the best trial again, a Ctrl-C that leaves no trial running, and the --space errors."""

import functools
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import DATA, ROOT

optuna = pytest.importorskip("optuna", reason="tune needs Optuna (the [tune] extra)")

FLAGS = [
    "--train",
    str(DATA / "sentiment_train.tsv"),
    "--dev",
    str(DATA / "sentiment_dev.tsv"),
    "--model",
    "scratch:tiny",
    "--epochs",
    "1",
    "--batch-size",
    "32",
    "--max-len",
    "32",
    "--lr",
    "2e-3",
    "--threads",
    "1",
    "--log-steps",
    "4",
]
SPACE = "lr=1e-3..3e-3:log,warmup=0|0.1"


def tune(out, *extra, check=True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ernie_ft", "tune", "classify", *FLAGS, "--output", str(out), *extra]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def load(out):
    return optuna.load_study(study_name=os.path.basename(out), storage=f"sqlite:///{out}/study.db")


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    """A study of 4 trials run 2 at a time, then the same command with --trials 6, whose threshold pruner (above
    any accuracy) prunes both new trials at their first evaluation after --prune-warmup's half epoch: evaluated
    every 4 steps of their epoch of 11, they are spared at step 4 and pruned at step 8."""
    out = tmp_path_factory.mktemp("tune") / "search"
    first = tune(out, "--trials", "4", "--workers", "2", "--space", SPACE, "--pruner", "none")
    after_four = [(t.number, t.state.name) for t in load(out).trials]
    pruning = ["--pruner", "threshold:1.01", "--prune-warmup", "0.5", "--eval-steps", "4"]
    second = tune(out, "--trials", "6", "--workers", "2", "--space", SPACE, *pruning)
    return out, first, second, after_four


def test_a_study_of_four_trials_on_two_workers_loads_in_optuna(study_dir):
    out, first, _, after_four = study_dir
    assert after_four == [(n, "COMPLETE") for n in range(4)], first.stderr[-3000:]
    assert "2 at once, 1 threads each" in first.stderr
    rows = (out / "trials.tsv").read_text(encoding="utf-8").splitlines()
    assert rows[0].split("\t") == ["trial", "lr", "warmup", "dev accuracy", "state", "seconds"]
    assert len(rows) == 7  # the header and the 6 trials after the second call
    for n in range(4):
        assert (out / f"trial-{n:03d}" / "best" / "config.json").is_file()
    assert (out / "history.png").stat().st_size > 0 and (out / "params.png").stat().st_size > 0


def test_trial_zero_runs_the_flags_as_given(study_dir):
    out = study_dir[0]
    first = load(out).trials[0]
    assert first.params == {"lr": 2e-3, "warmup": 0.1}
    recipe = first.user_attrs["recipe"]
    assert recipe["train"]["lr"] == 2e-3 and recipe["train"]["epochs"] == 1 and recipe["data"]["max_len"] == 32
    others = [t.params for t in load(out).trials[1:4]]
    assert all(1e-3 <= p["lr"] <= 3e-3 and p["warmup"] in (0, 0.1) for p in others) and first.params not in others


def test_a_second_call_goes_on_to_the_larger_count_and_prunes(study_dir):
    out, _, second, _ = study_dir
    trials = load(out).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4 + ["PRUNED"] * 2, second.stderr[-3000:]
    assert "4 trial(s) so far, --trials 6" in second.stderr
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 6  # the second call drew none of the first's
    for t in trials[4:]:
        reported = list(t.intermediate_values)  # hundredths of an epoch: steps 4 and 8 of 11
        assert reported == [round(100 * 4 / 11), round(100 * 8 / 11)]
        log = (out / f"trial-{t.number:03d}" / "logs" / "tune.log").read_text(encoding="utf-8")
        assert "pruned by the search at step 8" in log and "stopped at step 8/11" in log
        assert not (out / f"trial-{t.number:03d}" / "metrics.json").exists()


def test_the_best_checkpoint_predicts_and_its_recipe_trains_it_again(study_dir, tmp_path, capsys):
    from ernie_ft.cli import main

    out = study_dir[0]
    best = load(out).best_trial
    assert os.path.realpath(out / "best") == os.path.realpath(out / f"trial-{best.number:03d}" / "best")
    inputs = DATA / "predict.txt"
    capsys.readouterr()
    assert main(["predict", "--model", str(out / "best"), "--input", str(inputs)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    texts = inputs.read_text(encoding="utf-8").split("\n")
    assert len(lines) == len([t for t in texts if t.strip()]) and all(r["label"] in ("正面", "负面") for r in lines)
    again = tmp_path / "again"  # in this process: the recipe holds every setting the trial's own process had
    assert main(["classify", "--config", str(out / "best.yaml"), "--output", str(again)]) == 0
    dev = json.loads((again / "metrics.json").read_text(encoding="utf-8"))["dev"]["accuracy"]
    assert dev == best.value
    assert (out / "best.yaml").read_text(encoding="utf-8").startswith("# python -m ernie_ft classify --config ")


@pytest.mark.parametrize(
    "space, message",
    [
        ("lrr=1e-4..1e-2", "--lrr is not a setting of this task. Did you mean lr?"),
        ("lr=1e-2..1e-4", "the range's low end must be below its high end"),
        ("lr=0..1e-2:log", "a :log range must start above 0"),
        ("epochs=1.5..3", "'1.5' is not a whole number"),
        ("warmup=0..1", "--warmup 1.0 is refused: --warmup is a fraction of the steps"),
        ("batch_size=0|16", "--batch-size 0 is refused: --batch-size must be at least 1"),
        ("amp=off|fp8", "--amp fp8 is refused: --amp must be off, fp16 or bf16"),
        ("train=a.tsv|b.tsv", "--train cannot be searched"),
        ("lr=1e-3", "give a range LOW..HIGH or choices A|B"),
    ],
)
def test_a_bad_space_is_one_clear_error(space, message, tmp_path, capsys):
    from ernie_ft.cli import main

    status = main(["tune", "classify", *FLAGS, "--output", str(tmp_path / "s"), "--trials", "2", "--space", space])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err[-1].startswith(f"error: --space {space!r}: ") and message in err[-1], err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--prune-warmup=-0.5", "--prune-warmup -0.5: give the epochs a trial trains before any pruning, 0 or more"),
        ("--pruner=best", "--pruner best: give median, hyperband, none or threshold:VALUE"),
    ],
)
def test_a_bad_search_flag_is_one_clear_error(flag, message, tmp_path, capsys):
    from ernie_ft.cli import main

    status = main(["tune", "classify", *FLAGS, "--output", str(tmp_path / "s"), "--trials", "2", flag])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err[-1].startswith(f"error: {message}"), err
    assert not (tmp_path / "s").exists()


def test_trial_zero_outside_the_space_widens_it_with_a_warning(tmp_path, capsys):
    from ernie_ft.cli.tune import TUNE_FLAGS, build_parser, split_task
    from ernie_ft.recipes import build_config
    from ernie_ft.task import resolve_task, task_options
    from ernie_ft.tuning.plan import Plan
    from ernie_ft.tuning.space import parse_space, settings_of

    spec, rest = split_task(["classify", *FLAGS, "--output", str(tmp_path), "--trials", "1"])
    cls = resolve_task(spec)
    args = vars(build_parser("tune", spec, cls).parse_args(rest))
    for name in TUNE_FLAGS:
        args.pop(name, None)
    plan = Plan.from_config(spec, cls, build_config({}, args, task_fields=task_options(cls)))
    space = parse_space("lr=1e-4..1e-3:log,batch_size=8|16", settings_of(task_options(cls)), plan.config)
    widened = [p.holding(plan.given(p.name)) for p in space.params]
    assert [p.describe() for p in widened] == ["lr=0.0001..0.002:log", "batch_size=8|16|32"]
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning: --space lr=0.0001..0.001:log widened to lr=0.0001..0.002:log: trial 0 runs the flags as given "
        "(--lr 0.002)",
        "warning: --space batch_size=8|16 widened to batch_size=8|16|32: trial 0 runs the flags as given "
        "(--batch-size 32)",
    ]


def test_ctrl_c_leaves_no_trial_running_and_the_next_call_runs_them_again(tmp_path):
    out = tmp_path / "stopped"
    command = [sys.executable, "-m", "ernie_ft", "tune", "classify", *FLAGS, "--output", str(out)]
    command += ["--trials", "3", "--workers", "2", "--space", SPACE, "--epochs", "50"]
    # Ctrl-C's SIGINT as a terminal delivers it: a shell without job control starts a background job (this test run
    # too, through it) with SIGINT ignored, which the search would inherit and rightly keep
    restore = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    proc = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True, preexec_fn=restore)
    seen = []
    for line in proc.stderr:  # both trials started (their processes are up): stop the search
        seen.append(line)
        if sum(line.startswith(f"trial {n}: lr") for n in (0, 1) for line in seen) == 2:
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=300) == 130, "".join(seen) + rest
    trials = load(out).trials
    assert {t.number: t.state.name for t in trials} == {0: "FAIL", 1: "FAIL", 2: "WAITING", 3: "WAITING"}, rest
    assert all(t.user_attrs.get("interrupted") for t in trials[:2])
    queued = [t.system_attrs["fixed_params"] for t in trials[2:]]
    assert sorted(t.params["lr"] for t in trials[:2]) == sorted(p["lr"] for p in queued)
    assert "marked failed; its parameters run again next time" in rest


def test_a_killed_search_leaves_its_trial_to_the_heartbeat_and_the_next_call_runs_it_again(tmp_path):
    """SIGKILL leaves no time to mark the running trial: its heartbeat stops, and once it is two intervals old the
    next call fails it and runs its parameters again."""
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "ernie_ft", "tune", "classify", *FLAGS, "--output", str(out)]
    command += ["--trials", "1", "--space", SPACE, "--pruner", "none", "--heartbeat", "1"]
    proc = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if line.startswith("trial 0: lr"):
            break
    proc.kill()
    proc.wait(timeout=60)
    (trial,) = load(out).trials
    assert trial.state.name == "RUNNING"
    storage = optuna.storages.RDBStorage(f"sqlite:///{out}/study.db", heartbeat_interval=1)
    deadline = time.monotonic() + 60  # the heartbeat ages 2 s (twice --heartbeat) before the study calls it stale
    while not storage._get_stale_trial_ids(load(out)._study_id):
        assert time.monotonic() < deadline, "the killed search's trial kept a fresh heartbeat"
        time.sleep(0.2)
    second = tune(out, "--trials", "1", "--space", SPACE, "--pruner", "none", "--heartbeat", "1")
    assert "note: trial 0 was running without a heartbeat" in second.stderr, second.stderr
    trials = load(out).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].params == trial.params and trials[1].user_attrs["again"] == 0
