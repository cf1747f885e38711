"""The parts of Label Studio's Start training that need no Label Studio and no training (``serving.run_data``,
``serving.runs``, ``serving.retrain``): tasks sliced by a hash of their id, the served model's training examples as
Label Studio tasks that read back the same, a recipe every task accepts, the swap decided right way round, one run at
a time in a bounded queue, and old runs pruned but never the served one. tests/test_label_studio_training.py runs
them against a real Label Studio."""

import asyncio
import json

import pytest
from conftest import DATA

from ernie_ft.config import DataConfig
from ernie_ft.recipes import build_config, load_recipe
from ernie_ft.serving import run_data
from ernie_ft.serving.retrain import Scores, too_few
from ernie_ft.serving.runs import RunQueue, new_run, prune
from ernie_ft.task import load_task, task_options, unused_data_settings


def choice(task_id, label, text="好"):
    value = {"choices": [label]}
    result = [{"from_name": "情感", "to_name": "评论", "type": "choices", "value": value}]
    return {"id": task_id, "data": {"comment": f"{text}{task_id}"}, "annotations": [{"result": result}]}


def test_a_task_keeps_its_slice_whatever_is_annotated_before_it():
    tasks = [choice(i, "正面") for i in range(1, 401)]
    slices = run_data.project_slices(tasks, ("comment",))
    where = {t["id"]: name for name, part in slices.items() for t in part}
    assert {name: len(part) for name, part in slices.items()} == pytest.approx(
        {"train": 280, "select": 40, "decide": 80}, abs=25
    )
    earlier = [choice(i, "负面") for i in range(1000, 1060)]  # annotated later, with lower positions in the export
    again = run_data.project_slices([*earlier, *reversed(tasks), {"id": 5, "data": {"comment": "x"}}], ("comment",))
    moved = {t["id"]: name for name, part in again.items() for t in part if t["id"] in where}
    assert moved == where  # by the id's hash, not by position; the unannotated task 5 is in no slice
    assert slices["decide"][0]["data"] == {"text": slices["decide"][0]["data"]["text"]}  # the text under "text"


EXAMPLES = {
    "classify": (DATA / "sentiment_dev.tsv", lambda e: (e.text, e.label)),
    "pairs": (DATA / "pairs_dev.tsv", lambda e: (e.text, e.text_pair, e.label)),
    "ner": (DATA / "ner_dev.jsonl", lambda e: (e.text, e.entities)),
}


@pytest.mark.parametrize("name", ["classify", "pairs", "ner", "relation"])
def test_the_served_models_examples_read_back_the_same_as_label_studio_tasks(name, tmp_path, capsys):
    if name == "relation":
        path = tmp_path / "rel.jsonl"
        text = "《红楼梦》的作者是曹雪芹，曹雪芹出生于南京"
        spo = [{"subject": "红楼梦", "subject_type": "图书作品", "predicate": "作者", "object": {"@value": "曹雪芹"},
                "object_type": {"@value": "人物"}},
               {"subject": "曹雪芹", "subject_type": "人物", "predicate": "出生地", "object": {"@value": "南京"},
                "object_type": {"@value": "地点"}}]  # fmt: skip
        path.write_text(json.dumps({"text": text, "spo_list": spo}, ensure_ascii=False) + "\n", encoding="utf-8")
        key = lambda e: (e.text, e.triples)  # noqa: E731
    else:
        path, key = EXAMPLES[name]
    task, data = load_task("classify" if name == "pairs" else name), DataConfig()
    examples = task.read(str(path), data, "--train")
    written = tmp_path / "tasks.json"
    written.write_text(json.dumps([run_data.as_task(e, None) for e in examples], ensure_ascii=False), encoding="utf-8")
    pair = "text_pair" if name == "pairs" else None  # what the run's recipe names for a sentence-pair model
    again = task.read(str(written), DataConfig(text_column="text", text_pair_column=pair), "--train")
    assert [key(e) for e in again] == [key(e) for e in examples] and examples


@pytest.mark.parametrize("name", ["classify", "ner", "relation"])
def test_the_runs_recipe_is_one_the_task_accepts(name, tmp_path):
    """The served model's run config holds every data setting, ``header`` and ``sheet`` among them, which ner and
    relation refuse in a recipe ('data.header' does not apply to this command)."""
    task = load_task(name)
    data = {**vars(DataConfig(train="old.tsv", max_len=48)), "header": True}
    run = {"data": data, "model": {"model": "scratch:tiny"}, "train": {"epochs": 2, "output": "elsewhere"}, "task": {}}
    paths, continued = {"train": "train.json", "dev": None, "decide": "d.json"}, run_data.Summary(continue_from="/m")
    recipe = run_data.write_recipe(run, task, name, paths, continued, str(tmp_path))
    config = build_config(load_recipe(recipe), {}, task_fields=task_options(type(task)),
                          unused_data=unused_data_settings(task))  # fmt: skip
    assert (config.data.train, config.data.dev, config.data.max_len) == ("train.json", None, 48)
    assert (config.model.model, config.train.output) == ("/m", str(tmp_path / "model"))
    assert open(recipe, encoding="utf-8").readline().startswith(f"# python -m ernie_ft {name} --config ")
    if name == "classify":  # a sentence-pair model's run reads the second text of each task as well
        recipe = run_data.write_recipe(run, task, name, paths, continued, str(tmp_path), pair=True)
        assert load_recipe(recipe)["data"]["text_pair_column"] == "text_pair"


def test_a_swap_needs_a_better_score_the_right_way_round_and_enough_tasks():
    assert Scores("accuracy", 0.5, 0.6).better() and not Scores("accuracy", 0.6, 0.5).better()
    assert not Scores("accuracy", 0.0, 0.0).better()  # two worthless models: a tie keeps the served one
    assert not Scores("f1", 0.75, 0.75).better()
    assert Scores("loss", 0.9, 0.4).better() and not Scores("loss", 0.4, 0.9).better()
    assert too_few(20, 20) is None
    assert too_few(3, 20) == ("3 held-out tasks decide a swap and at least 20 are needed (--min-dev-tasks): annotate "
                              "about 85 more tasks")  # fmt: skip


def test_runs_go_one_at_a_time_and_the_queue_is_bounded():
    async def scenario():
        queue, done, order = RunQueue(waiting=1), {k: asyncio.Event() for k in "ab"}, []

        def job(key):
            async def run():
                order.append(f"{key} starts")
                await done[key].wait()
                order.append(f"{key} ends")

            return run

        assert queue.add("a", "001", job("a")) == "started"
        assert queue.add("b", "002", job("b")) == "queued"
        assert queue.full() and queue.job_of("a") == "001" and queue.job_of("b") == "002" and queue.job_of("c") is None
        for _ in range(5):
            await asyncio.sleep(0)  # let the worker run as far as it can
        assert order == ["a starts"]  # b waits for a
        done["a"].set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert order == ["a starts", "a ends", "b starts"] and not queue.full() and queue.job_of("a") is None
        done["b"].set()
        await queue.worker
        assert order[-1] == "b ends" and queue.add("a", "003", job("a")) == "started"
        await queue.stop()

    asyncio.run(scenario())


def test_old_runs_are_pruned_but_never_the_served_models(tmp_path, capsys):
    runs = [new_run(str(tmp_path / "runs")) for _ in range(6)]
    assert [r.rsplit("/", 1)[1] for r in runs] == ["001", "002", "003", "004", "005", "006"]
    removed = prune(str(tmp_path / "runs"), 3, spare=[runs[1]])  # 002's model is served
    assert removed == [runs[0], runs[2]]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["002", "004", "005", "006"]
    assert "removed run 001, 003 (serve keeps the last 3: --keep-runs)" in capsys.readouterr().err


def test_the_new_model_is_exported_and_scored_as_serve_runs_the_served_one(tmp_path):
    """A served int8 export with --threshold, --task and --trust-pickle: the new model is exported to int8 too, and
    both are scored with that engine, threshold and task (the served one trusted as serve trusts it)."""
    from pathlib import Path
    from types import SimpleNamespace

    from ernie_ft.serving.retrain import Retrainer

    commands = []

    async def child(command, log, what):  # instead of a process: record it, write what evaluate would
        commands.append(command)
        if "--output-dir" in command:
            out = Path(command[command.index("--output-dir") + 1])
            out.mkdir(parents=True)
            (out / "metrics.json").write_text(json.dumps({"f1": 0.5 if "eval-new" in out.name else 0.25}))

    served = SimpleNamespace(engine="onnxruntime-int8", task_spec="tasks/tagger.py:Tagger", threshold=0.3,
                             trust_pickle=True, on_gpu=False, model_dir="/runs/v1-int8", task=load_task("ner"),
                             loaded=SimpleNamespace(run={"train": {"metric": "f1"}}))  # fmt: skip
    retrainer = Retrainer(lambda: served, None, None, runs=str(tmp_path / "runs"))
    retrainer.child = child
    run = str(tmp_path / "run")
    new = asyncio.run(retrainer.like_served(served, "/run/model/best", run))
    assert new == "/run/model/best-onnxruntime-int8"
    assert commands[0][2:] == ["ernie_ft", "export", "--model", "/run/model/best", "--output", new, "--task",
                               "tasks/tagger.py:Tagger", "--format", "onnx", "--quantize", "int8"]  # fmt: skip
    scores = asyncio.run(retrainer.scores(served, new, run))
    assert (scores.metric, scores.served, scores.new, scores.better()) == ("f1", 0.25, 0.5, True)
    flags = ["--input", f"{run}/data/decide.json", "--engine", "onnxruntime-int8", "--device", "cpu"]
    flags += ["--task", "tasks/tagger.py:Tagger", "--threshold", "0.3"]
    served_run, new_run_ = (c[c.index("--model") + 1 : c.index("--output-dir")] for c in commands[1:])
    assert served_run == ["/runs/v1-int8", *flags, "--trust-pickle"]
    assert new_run_ == [new, *flags]  # ner reads no --text-column


def test_a_relative_training_file_is_found_from_where_the_training_ran(tmp_path, monkeypatch):
    """The run config records paths as the training command was given them (``data/x.tsv`` with ``--output
    runs/v1``); serve may start elsewhere."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.tsv").write_text("text_a\tlabel\n", encoding="utf-8")
    run = {"data": {"train": "data/x.tsv"}, "train": {"output": "runs/v1"}}
    monkeypatch.chdir(tmp_path / "data")  # not where the training ran
    for checkpoint in (tmp_path / "runs" / "v1" / "best", tmp_path / "runs" / "v1"):
        assert run_data.located("data/x.tsv", str(checkpoint), run) == str(tmp_path / "data" / "x.tsv")
    assert run_data.located("data/y.tsv", str(tmp_path / "runs" / "v1" / "best"), run) is None
    assert run_data.located("x.tsv", "/elsewhere/best", run) == "x.tsv"  # as written, from here
