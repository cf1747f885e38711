"""``python -m ernie_ft serve``: answers equal ``predict``'s, dynamic batching, backpressure, bad requests,
readiness and SIGTERM draining, against tiny checkpoints of each built-in task."""

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
from conftest import DATA, ROOT
from helpers.chromium import submit  # the page driven as docs/pictures/serve_page.py drives it

CLASSIFY_INPUTS = [
    {"text": "房间很干净，服务也好"},
    {"text": "太差了"},
    {"text": "位置不错", "text_pair": "早餐一般"},
    {"text": "这家酒店" * 80},
]  # a long text: several windows
NER_INPUTS = [{"text": "吴敏昨天去苏州参加了星光科技公司的年会。"}, {"text": "今天天气很好"}]
FILL_INPUTS = [{"text": "这家酒店的服务很[MASK]。"}, {"text": "质量[MASK][MASK]差，不推荐"}]
QA_INPUTS = [{"question": "灯塔是哪一年建成的？", "context": "白沙角灯塔建于1903年，塔高三十六米。" * 6, "id": "q1"}]


def train(tmp_path_factory, module, *args) -> str:
    """``python -m ernie_ft.{module}`` on scratch:tiny for an epoch, in this process (a fresh interpreter would import
    Paddle again: seconds of CPU per model); the run's directory."""
    from ernie_ft.cli import task_command

    out = tmp_path_factory.mktemp(module) / "run"
    flags = ["--model", "scratch:tiny", "--epochs", "1", "--threads", "1", "--seed", "1", "--output", str(out)]
    assert task_command(module)([*flags, *args]) == 0
    return str(out)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return train(
        tmp_path_factory, "classify", "--train", str(DATA / "sentiment_train.tsv"), "--max-len", "64", "--stride", "16"
    )


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    return train(
        tmp_path_factory,
        "ner",
        "--train",
        str(DATA / "ner_train.jsonl"),
        "--crf",
        "--max-len",
        "64",
        "--epochs",
        "3",
        "--batch-size",
        "16",
        "--lr",
        "3e-3",
    )


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    return train(
        tmp_path_factory, "qa", "--train", str(DATA / "qa_train.json"), "--max-len", "64", "--doc-stride", "16"
    )


def client_for(model_dir, **limits):
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    return ReadyClient(create_app(ServedModel(model_dir, "dygraph", "cpu"), Limits(**limits)))


class ReadyClient:
    """A TestClient (lifespan started) that returns once /readyz says the model is warmed up."""

    def __init__(self, app):
        from fastapi.testclient import TestClient

        self.client = TestClient(app)

    def __enter__(self):
        client = self.client.__enter__()
        deadline = time.monotonic() + 60
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "not ready after 60 s"
            time.sleep(0.01)
        return client

    def __exit__(self, *exc):
        return self.client.__exit__(*exc)


def predicted_by_cli(model_dir, inputs, tmp_path, *extra):
    source, out = tmp_path / "inputs.jsonl", tmp_path / "pred.jsonl"
    source.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in inputs), encoding="utf-8")
    from ernie_ft.cli import main

    assert main(["predict", "--model", model_dir, "--input", str(source), "--output", str(out), *extra]) == 0
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def assert_same_records(served, written):
    """Equal records; floats (rounded by the task) may differ in the last rounded digit, as the batch differs."""
    assert len(served) == len(written)
    for a, b in zip(served, written):
        assert json.dumps(a, ensure_ascii=False, sort_keys=True, default=str) == json.dumps(
            b, ensure_ascii=False, sort_keys=True, default=str
        ) or _close(a, b), (a, b)


def _close(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_close, a, b))
    if isinstance(a, float) or isinstance(b, float):
        return abs(a - b) <= 2e-4 * max(1.0, abs(b))
    return a == b


@pytest.mark.parametrize(
    "fixture,inputs,task",
    [
        ("classifier", CLASSIFY_INPUTS, "classify"),
        ("tagger", NER_INPUTS, "ner"),
        ("reader", QA_INPUTS, "qa"),
        ("pretrained", FILL_INPUTS, "pretrain"),
    ],
)
def test_api_answers_equal_predict(fixture, inputs, task, request, tmp_path):
    model_dir = str(request.getfixturevalue(fixture))
    with client_for(model_dir) as client:
        info = client.get("/v1/info").json()
        served = client.post("/v1/predict", json={"inputs": inputs})
        one_by_one = [client.post("/v1/predict", json={"inputs": [i]}).json()["predictions"][0] for i in inputs]
    assert served.status_code == 200, served.text
    written = predicted_by_cli(model_dir, inputs, tmp_path)
    assert_same_records(served.json()["predictions"], written)
    assert_same_records(one_by_one, written)
    assert info["task"] == task and info["engine"] == "dygraph" and info["ready"]
    assert info["model"] == os.path.basename(model_dir) and not os.path.isabs(info["model"])  # a name, never a path
    assert info["limits"]["forward_batch_size"] == 16  # 0 given: the CPU's pass size
    assert set(info["inputs"]["required"]) <= set(inputs[0])


def test_clients_are_told_the_models_name_never_a_path():
    from ernie_ft.inference.outputs import model_name

    assert model_name("/srv/models/sentiment/") == "sentiment"
    assert model_name("runs/cs/best") == model_name("runs/cs") == "cs" and model_name("/runs/cs/last") == "cs/last"


def test_exported_engine_answers_like_dygraph(classifier, tmp_path):
    from ernie_ft.inference.export import export
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.model import ServedModel

    exported = export(classifier, str(tmp_path / "exported"))
    assert ServedModel(exported, "auto", "cpu").engine == "inference"
    assert ServedModel(classifier, "auto", "cpu").engine == "dygraph"

    with ReadyClient(create_app(ServedModel(exported, "auto", "cpu"))) as client:
        served = client.post("/v1/predict", json={"inputs": CLASSIFY_INPUTS}).json()["predictions"]
    assert_same_records(served, predicted_by_cli(classifier, CLASSIFY_INPUTS, tmp_path))


def test_every_bad_request_gets_a_4xx_naming_the_field(classifier):
    with client_for(classifier, max_inputs=3, max_chars=50, max_body_bytes=2000) as client:

        def error(body=None, content=None, headers=None):
            response = client.post("/v1/predict", json=body, content=content, headers=headers)
            return response.status_code, response.json()["error"]["field"], response.json()["error"]["message"]

        assert error(content='{"inputs": [{"text": "好"'.encode(), headers={"content-type": "application/json"})[
            :2
        ] == (400, "body")
        assert error(content=b"not json")[:2] == (400, "body")
        assert error({"inputs": [{"text": 1}]})[:2] == (422, "inputs[0].text")
        assert error({"inputs": [{"text": "好"}, {"text": "   "}]})[:2] == (422, "inputs[1].text")
        assert error({"inputs": [{"text": "好"}, {"text": "好" * 51}]})[:2] == (422, "inputs[1].text")
        assert error({"inputs": [{"text": "好"}] * 4})[:2] == (422, "inputs")
        assert error({"inputs": []})[:2] == (422, "inputs")
        assert error({"inputs": [{"txt": "好"}]})[:2] == (422, "inputs[0].text")
        assert error({"inputs": [{"text": "好", "label": "正面"}]})[:2] == (422, "inputs[0].label")
        assert error({"text": "好"})[:2] == (422, "inputs")
        assert error({"inputs": [{"text": "好" * 40}] * 3} | {"pad": "x" * 2000})[:2] == (413, "body")
        # a body streamed without Content-Length is cut off at the limit too
        chunks = (part for part in [b'{"inputs": [{"text": "', "好".encode() * 1000, b'"}]}'])
        response = client.post("/v1/predict", content=chunks, headers={"content-type": "application/json"})
        assert response.status_code == 413 and response.json()["error"]["field"] == "body"
        assert client.post("/v1/predict", json={"inputs": [{"text": "好"}]}).status_code == 200  # still serving


TEXT_SHAPES = (
    'expected {"inputs": [{"text": "..."}]}, {"inputs": {"text": "..."}}, {"inputs": ["...", ...]} or {"inputs": "..."}'
)
QA_SHAPES = (
    'expected {"inputs": [{"question": "...", "context": "..."}]} or {"inputs": {"question": "...", "context": "..."}}'
)


@pytest.mark.parametrize("fixture,inputs", [("classifier", CLASSIFY_INPUTS), ("tagger", NER_INPUTS)])
def test_hugging_face_shapes_get_the_record_forms_answers(fixture, inputs, request):
    # {"inputs": "..."} (HF Inference API), {"inputs": ["...", ...]} (text-embeddings-inference) and one record
    # {"inputs": {...}}: the records of the same texts, answered as the record form answers them.
    texts = [i["text"] for i in inputs]
    with client_for(str(request.getfixturevalue(fixture))) as client:

        def predictions(inputs):
            response = client.post("/v1/predict", json={"inputs": inputs})
            assert response.status_code == 200, response.text
            return response.json()["predictions"]

        as_records = predictions([{"text": t} for t in texts])
        assert predictions(texts) == as_records  # the same request, so the same batch: equal to the digit
        first = predictions([{"text": texts[0]}])
        assert len(first) == 1 and first[0]["text"] == texts[0]
        assert predictions(texts[0]) == first == predictions({"text": texts[0]})  # a list of one prediction
        assert_same_records(first, as_records[:1])


def test_each_malformed_body_gets_a_422_naming_the_field_and_the_accepted_shapes(classifier):
    with client_for(classifier, max_inputs=3, max_chars=50) as client:

        def error(body):
            response = client.post("/v1/predict", json=body)
            assert response.status_code == 422, response.text
            return response.json()["error"]["field"], response.json()["error"]["message"]

        for body, field in (
            ({"text": "好"}, "inputs"),
            ({}, "inputs"),
            ({"inputs": 5}, "inputs"),
            ({"inputs": None}, "inputs"),
            ({"inputs": []}, "inputs"),
            ({"inputs": [5]}, "inputs[0]"),
            ({"inputs": ["好", ["好"]]}, "inputs[1]"),
            ({"inputs": [{"text": 1}]}, "inputs[0].text"),
            ({"inputs": {"txt": "好"}}, "inputs.text"),
            ([{"text": "好"}], "body"),
        ):
            where, message = error(body)
            assert (where, message.endswith("; " + TEXT_SHAPES)) == (field, True), (body, message)
        assert error({"text": "好"})[1].startswith('missing (the body has "text"); expected')
        assert error({"inputs": "好", "parameters": {"top_k": 2}}) == (  # Hugging Face's parameters: POST /
            "parameters.top_k",
            "unknown parameter (this endpoint takes threshold; Hugging Face's task parameters go to POST /)",
        )
        assert error({"inputs": "好", "parameters": {"threshold": 0.3}}) == (
            "parameters.threshold",
            "this model decides by no threshold (it takes none)",
        )
        assert error({"inputs": [{"text": "好", "label": "正面"}]}) == (
            "inputs[0].label",
            f"unknown field (an input's fields: text, text_pair); {TEXT_SHAPES}",
        )
        # a text's own mistake keeps its own message, named where it is in the shape sent
        assert error({"inputs": ["好", "好" * 51]}) == ("inputs[1]", "String should have at most 50 characters")
        assert error({"inputs": "好" * 51}) == ("inputs", "String should have at most 50 characters")
        assert error({"inputs": ["好", "  "]}) == ("inputs[1]", "Value error, must not be empty")
        assert error({"inputs": {"text": "好", "text_pair": " "}}) == (
            "inputs.text_pair",
            "Value error, must not be empty",
        )
        assert error({"inputs": ["好"] * 4}) == ("inputs", "4 inputs; at most 3 in one request (serve --max-inputs)")
        assert client.post("/v1/predict", json={"inputs": ["好"] * 3}).status_code == 200  # at the limit: served


def test_qa_takes_one_record_and_refuses_texts_showing_its_shape(reader):
    with client_for(reader) as client:
        records = client.post("/v1/predict", json={"inputs": QA_INPUTS})
        one = client.post("/v1/predict", json={"inputs": QA_INPUTS[0]})  # Hugging Face's question-answering shape

        def error(body):
            response = client.post("/v1/predict", json=body)
            assert response.status_code == 422, response.text
            return response.json()["error"]["field"], response.json()["error"]["message"]

        assert error({"inputs": QA_INPUTS[0]["context"]}) == ("inputs", f"got a string; {QA_SHAPES}")
        assert error({"inputs": ["灯塔是哪一年建成的？"]}) == ("inputs[0]", f"got a string; {QA_SHAPES}")
        assert error({"inputs": {"question": "哪一年？"}}) == ("inputs.context", f"required; {QA_SHAPES}")
        assert error({"question": "哪一年？", "context": "建于1903年。"})[1].endswith(QA_SHAPES)
    assert records.status_code == one.status_code == 200, (records.text, one.text)
    assert one.json()["predictions"] == records.json()["predictions"]


def test_a_qa_input_without_context_names_the_field(reader):
    with client_for(reader) as client:
        response = client.post("/v1/predict", json={"inputs": [{"question": "哪一年？"}]})
    assert response.status_code == 422 and response.json()["error"]["field"] == "inputs[0].context"


def test_a_field_the_task_refuses_gets_a_422_naming_it(pretrained):
    # A text without [MASK] passes the request schema; the fill-mask task's reader refuses it, naming the field
    # where it is, in its own words (no file path rewritten after the fact).
    with client_for(str(pretrained)) as client:
        response = client.post("/v1/predict", json={"inputs": [{"text": "质量[MASK]差"}, {"text": "没有掩码的句子"}]})
        assert client.post("/v1/predict", json={"inputs": FILL_INPUTS}).status_code == 200  # still serving
    error = response.json()["error"]
    assert response.status_code == 422 and error["field"] == "inputs[1].text", error
    assert error["message"].startswith("inputs[1].text: no [MASK] in this text"), error


@pytest.mark.parametrize(
    "fixture,inputs", [("classifier", CLASSIFY_INPUTS), ("tagger", NER_INPUTS), ("reader", QA_INPUTS)]
)
def test_serving_writes_no_temporary_file(fixture, inputs, request, monkeypatch):
    # The inputs reach the built-in tasks as records in memory: any temporary file (TaskHooks.read_records'
    # fallback for custom tasks makes one) fails the request.
    import tempfile

    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.model import ServedModel

    served = ServedModel(str(request.getfixturevalue(fixture)), "dygraph", "cpu")

    def no_file(*args, **kwargs):
        raise AssertionError("a temporary file was made while serving")

    for name in ("mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryFile", "TemporaryDirectory"):
        monkeypatch.setattr(tempfile, name, no_file)
    with ReadyClient(create_app(served)) as client:  # the warm-up too
        response = client.post("/v1/predict", json={"inputs": inputs})
    assert response.status_code == 200, response.text
    assert len(response.json()["predictions"]) == len(inputs)


# Records per task (the four built-in ones and the example custom task), read the same in memory and from a file.
GOOD_RECORDS = {
    "classify": [
        {"text": "房间很干净", "text_b": "服务也好"},
        {"text": " 太差了 ", "text_b": "早餐一般"},
        {"text": 5, "text_b": 6},
    ],
    "ner": [{"text": "吴敏昨天去苏州参加了年会。"}, {"text": " 今天天气很好 "}],
    "qa": [
        {"question": "灯塔是哪一年建成的？", "context": "白沙角灯塔建于1903年。", "id": "q1"},
        {"question": "塔高多少？", "context": "塔高三十六米。"},
    ],
    "pretrain": [{"text": "这家酒店的服务很[MASK]。"}, {"text": "质量[MASK][MASK]差", "text_b": "不推荐"}],
    "intent": [{"text": "明天早上七点叫我起床"}, {"text": "关灯", "labels": []}],
}
# Second records each reader must refuse (empty text, a required field missing, a wrong type), and the field
# the in-memory message names.
BAD_RECORDS = {
    "classify": [({"text": "  "}, "text"), ({"text_b": "好"}, "text"), ({"text": ["好"]}, "text")],
    "ner": [({"text": ""}, "text"), ({"sentence": "好"}, "text"), ({"text": 3}, "text")],
    "qa": [
        ({"question": "哪一年？", "context": " "}, "context"),
        ({"context": "建于1903年。"}, "question"),
        ({"question": ["哪一年？"], "context": "建于1903年。"}, "question"),
        ({"question": "哪一年？", "context": "建于1903年。", "id": "q1"}, "id"),  # the first record's id again
    ],
    "pretrain": [
        ({"text": ""}, "text"),
        ({"title": "[MASK]"}, "text"),
        ({"text": {"a": 1}}, "text"),
        ({"text": "没有掩码"}, "text"),
    ],
    "intent": [
        ({"text": " "}, "text"),
        ({"labels": []}, "text"),
        ({"text": 7}, "text"),
        ({"text": "好", "labels": "x"}, "labels"),
    ],
}


def task_named(name: str):
    from ernie_ft.task import load_task

    return load_task(f"{ROOT / 'tasks' / 'multilabel_intent.py'}:MultiLabelIntent" if name == "intent" else name)


def read_both(task, records, tmp_path):
    """(examples read in memory, examples read from a JSONL file of the records), or the UserErrors raised."""
    from ernie_ft.config import DataConfig
    from ernie_ft.errors import UserError

    path = tmp_path / "inputs.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    results = []
    for read in (
        lambda: task.read_records(records, DataConfig(), "inputs"),
        lambda: task.read(str(path), DataConfig(), "inputs", labelled=False),
    ):
        try:
            results.append(read())
        except UserError as e:
            results.append(e)
    return results


def in_memory(example, path: str):
    """``example`` as read from ``path`` with its place given as records in memory name it."""
    if hasattr(example, "where"):  # QA: path:LINE -> inputs[LINE - 1]
        return dataclasses.replace(example, where=f"inputs[{int(example.where.rsplit(':', 1)[1]) - 1}]")
    assert example.source == path
    return dataclasses.replace(example, source="inputs")


@pytest.mark.parametrize("task_name", list(GOOD_RECORDS))
def test_records_read_in_memory_are_the_examples_the_file_reader_gives(task_name, tmp_path):
    task = task_named(task_name)
    records = GOOD_RECORDS[task_name]
    from_memory, from_file = read_both(task, records, tmp_path)
    assert not isinstance(from_file, Exception), from_file
    assert from_memory == [in_memory(e, str(tmp_path / "inputs.jsonl")) for e in from_file]
    assert len(from_memory) == len(records)
    for bad, field in BAD_RECORDS[task_name]:
        from_memory, from_file = read_both(task, [records[0], bad], tmp_path)
        assert isinstance(from_file, Exception), (bad, from_file)  # the file reader refuses it...
        assert isinstance(from_memory, Exception), (bad, from_memory)  # ...and so does reading it in memory,
        assert str(from_memory).startswith(f"inputs[1].{field}: "), (bad, str(from_memory))  # naming the field
        assert str(tmp_path) not in str(from_memory)


SCENARIO_SECONDS = 120
"""The longest an in-process scenario may take: a regression that stops an answer fails the test, never hangs it."""


async def until(client, path, done, seconds=60):
    """GET ``path`` until ``done(its JSON body)``; an AssertionError with the last body after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        response = await client.get(path)
        body = response.json() if response.headers.get("content-type", "").startswith("application/json") else None
        if response.status_code == 200 and done(body):
            return body
        assert time.monotonic() < deadline, f"{path} after {seconds} s: {response.status_code} {body}"
        await asyncio.sleep(0.01)


async def until_ready(client):
    await until(client, "/readyz", lambda body: True)


@pytest.mark.parametrize("forward_batch_size", [0, 5])
def test_batches_form_under_concurrency_and_each_answer_keeps_its_request(classifier, forward_batch_size, monkeypatch):
    from ernie_ft.models import modeling
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    served = ServedModel(classifier, "dygraph", "cpu")
    texts = [f"第{i}号房间{'很干净' if i % 2 else '太吵了'}" + "好" * (i % 7) for i in range(48)]
    expected = dict(zip(texts, served.answer(*_run(served, texts))))
    passes = []  # the batch size of every forward pass the server makes
    forward = modeling.forward
    monkeypatch.setattr(
        modeling, "forward", lambda model, batch: passes.append(len(batch["input_ids"])) or forward(model, batch)
    )

    async def scenario():
        app = create_app(served, Limits(max_batch_size=16, max_wait_ms=50, forward_batch_size=forward_batch_size))
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        async with app.router.lifespan_context(app), client:
            await until_ready(client)
            answers = await asyncio.gather(*(client.post("/v1/predict", json={"inputs": [{"text": t}]}) for t in texts))
            return answers, (await client.get("/v1/stats")).json()

    answers, stats = asyncio.run(asyncio.wait_for(scenario(), SCENARIO_SECONDS))
    for text, answer in zip(texts, answers):
        record = answer.json()["predictions"][0]
        assert record["text"] == text and _close(record, expected[text])
    sizes = {int(k): v for k, v in stats["batch_sizes"].items()}
    assert stats["requests"] == 48 and sum(k * v for k, v in sizes.items()) == 48 + 1  # + the warm-up
    assert max(sizes) > 1 and max(sizes) <= 16  # concurrent requests shared dynamic batches, within the limit
    # each dynamic batch ran as passes of at most --forward-batch-size windows (0: 16 on a CPU)
    limit = forward_batch_size or 16
    assert sum(passes) == 48 + 1 and max(passes) <= limit
    assert len(passes) == sum(-(-size // limit) * count for size, count in sizes.items())


def test_a_request_alone_does_not_wait_for_company(classifier):
    # With no other request being read nothing can join its batch: it must run at once, not after
    # max_wait_ms (10 minutes here, so waiting would time the request out).
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    served = ServedModel(classifier, "dygraph", "cpu")

    async def scenario():
        app = create_app(served, Limits(max_wait_ms=600_000))
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        async with app.router.lifespan_context(app), client:
            await until_ready(client)
            return await client.post("/v1/predict", json={"inputs": [{"text": "很好"}]})

    assert asyncio.run(asyncio.wait_for(scenario(), SCENARIO_SECONDS)).status_code == 200  # the warm-up too ran at once


def _run(served, texts):
    examples, features = served.prepare([{"text": t} for t in texts])
    return examples, features, served.logits(features, 64)


def test_a_full_queue_answers_503_with_retry_after(classifier):
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    served = ServedModel(classifier, "dygraph", "cpu")
    gate, entered = threading.Event(), threading.Event()
    logits = served.logits

    def held(features, batch_size):  # the model thread waits until the test has filled the queue
        entered.set()
        gate.wait(30)
        return logits(features, batch_size)

    async def scenario():
        app = create_app(served, Limits(max_batch_size=1, max_wait_ms=0, max_queue=2))
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        async with app.router.lifespan_context(app), client:
            await until_ready(client)
            served.logits = held
            first = asyncio.create_task(client.post("/v1/predict", json={"inputs": [{"text": "一"}]}))
            await asyncio.get_running_loop().run_in_executor(None, entered.wait, 30)  # in the model
            queued = [
                asyncio.create_task(client.post("/v1/predict", json={"inputs": [{"text": t}]})) for t in ("二", "三")
            ]
            await until(client, "/v1/stats", lambda stats: stats["queued"] >= 2)
            rejected = await client.post("/v1/predict", json={"inputs": [{"text": "四"}]})
            gate.set()
            return rejected, await asyncio.gather(first, *queued)

    rejected, served_ok = asyncio.run(asyncio.wait_for(scenario(), SCENARIO_SECONDS))
    assert rejected.status_code == 503 and rejected.headers["retry-after"] == "1"
    assert rejected.json()["error"]["field"] == "queue"
    assert [r.status_code for r in served_ok] == [200, 200, 200]  # nothing lost behind the full queue


# ------------------------------------------------------------------ a real server process


class Server:
    """``serve --port 0`` in a process of its own: the system gives it a free port, which the server names in its
    "serving ... on http://HOST:PORT/" line (no port found free here, released and handed over: another process could
    take it in between)."""

    def __init__(self, model_dir, tmp_path, *extra, env=None):
        self.url = None
        self.log = open(tmp_path / "serve.log", "w+")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ernie_ft",
                "serve",
                "--model",
                model_dir,
                "--port",
                "0",
                "--device",
                "cpu",
                *extra,
            ],
            stdout=self.log,
            stderr=self.log,
            env=None if env is None else {**os.environ, **env},  # env: variables set for serve (BASIC_AUTH_USER...)
        )

    def wait_ready(self, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            self.url = self.url or served_url(self.output())
            if self.url is None:  # the model is still loading
                time.sleep(0.1)
                continue
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError("not ready: " + self.output())

    def output(self):
        self.log.flush()
        self.log.seek(0)
        text = self.log.read()
        self.log.seek(0, os.SEEK_END)
        return text

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def served_url(output: str) -> str | None:
    """The address in the line ``serve`` prints once it listens, or None before it is printed."""
    found = re.search(r"^serving .* on (http://127\.0\.0\.1:(\d+))/$", output, re.MULTILINE)
    if found:
        assert int(found[2]) > 0, found[0]  # the port the system gave, not the 0 asked for
    return found and found[1]


def test_sigterm_drains_in_flight_requests_then_exits_0(classifier, tmp_path):
    server = Server(classifier, tmp_path, "--max-batch-size", "1", "--max-wait-ms", "0")
    try:
        server.wait_ready()
        assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}
        texts = ["这家酒店" * 60 + str(i) for i in range(24)]  # enough work to be in flight at SIGTERM
        results = [None] * len(texts)

        def call(i):
            try:
                results[i] = httpx.post(server.url + "/v1/predict", json={"inputs": [{"text": texts[i]}]}, timeout=120)
            except httpx.HTTPError as error:
                results[i] = error

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(texts))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while True:  # every request has reached the server (a request still connecting would be refused),
            stats = httpx.get(server.url + "/v1/stats").json()  # and some have been answered
            if stats["requests"] + stats["in_flight"] == len(texts) and stats["batches"] >= 3:
                break
            assert time.monotonic() < deadline, stats
            time.sleep(0.01)
        assert stats["requests"] < len(texts)  # so some are in flight at SIGTERM
        server.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(150)
        assert server.proc.wait(60) == 0, server.output()
        assert [getattr(r, "status_code", r) for r in results] == [200] * len(texts), server.output()
        assert [r.json()["predictions"][0]["text"] for r in results] == texts
    finally:
        server.stop()


def test_a_port_in_use_is_one_error_line(classifier, capsys):
    from ernie_ft.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", classifier, "--port", str(port), "--device", "cpu"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --host 127.0.0.1 --port {port}: cannot listen there (Address already in use); --port 0 picks a free "
        "port"
    ]


def test_the_servers_connections_send_without_waiting_for_the_clients_ack():
    """A connection accepted on ``listen``'s socket by asyncio's server (uvicorn's) has TCP_NODELAY: without it a
    keep-alive client waits out its delayed ACK (40 ms) between each response's headers and body (seen: 48 ms per
    request from ``http.client`` against ``serve`` of a nano int8 export, 1.7 ms with it; curl, a new connection
    each time, 3 ms either way)."""
    from ernie_ft.serving import listen

    async def accepted_nodelay() -> int:
        seen = asyncio.get_running_loop().create_future()

        def handle(reader, writer):
            seen.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        sock = listen("127.0.0.1", 0)
        async with await asyncio.start_server(handle, sock=sock):
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            value = await asyncio.wait_for(seen, 30)
            writer.close()
        return value

    assert asyncio.run(accepted_nodelay()) != 0


def test_serve_reports_a_bad_model_directory_in_one_line(tmp_path, capsys):
    from ernie_ft.cli import main

    assert main(["serve", "--model", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: --model {tmp_path / 'none'}: directory not found"]
    assert main(["serve", "--model", str(tmp_path), "--max-queue", "0"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["error: --max-queue must be positive, not 0"] and "Traceback" not in err


def test_the_page_is_one_offline_file_that_calls_the_api(classifier):
    with client_for(classifier) as client:
        page = client.get("/")
        docs = client.get("/openapi.json").json()
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/v1/predict" in page.text and "/v1/info" in page.text
    assert "http://" not in page.text and "https://" not in page.text  # no CDN: it works offline
    content = docs["paths"]["/v1/predict"]["post"]["requestBody"]["content"]["application/json"]
    body = content["schema"]
    assert "$ref" not in json.dumps(body)  # the request schema is spelled out on the OpenAPI page
    records, record, texts, text = body["properties"]["inputs"]["anyOf"]  # every accepted shape, records first
    assert records["items"]["required"] == ["text"] == record["required"]
    assert set(records["items"]["properties"]) == {"text", "text_pair"} == set(record["properties"])
    assert texts["items"]["type"] == "string" == text["type"] and texts["maxItems"] == records["maxItems"] == 64
    assert '{"inputs": ["...", ...]}' in body["properties"]["inputs"]["description"]
    assert [example["value"]["inputs"] for example in content["examples"].values()] == [
        [{"text": "你好，世界。"}],
        {"text": "你好，世界。"},
        ["你好，世界。", "你好，世界。"],
        "你好，世界。",
    ]  # one example of each shape, ready to send from the OpenAPI page


# ------------------------------------------------------------------ the page in a real headless Chromium
# Type a text, submit, read the rendered result from the DOM and compare it with the API's answer. The browser is
# conftest.py's fixture (skipped where Chromium is missing, failed in CI).


@contextlib.contextmanager
def page_and_api(browser, model_dir, tmp_path, text):
    """A server for ``model_dir``; yields the page's rendered result for ``text`` and the API's answer."""
    server = Server(model_dir, tmp_path)
    try:
        server.wait_ready()
        result = submit(browser, server.url + "/", {"text": text})
        yield result, httpx.post(server.url + "/v1/predict", json={"inputs": [{"text": text}]}).json()["predictions"][0]
    finally:
        server.stop()


def test_the_page_shows_a_classifiers_label_probabilities_as_bars(browser, classifier, tmp_path):
    from selenium.webdriver.common.by import By

    with page_and_api(browser, classifier, tmp_path, "房间很干净，服务也好，下次还来") as (result, api):
        assert result.get_attribute("data-kind") == "labels"
        assert browser.find_element(By.ID, "label").text == api["label"]
        bars = {
            row.get_attribute("data-label"): float(row.get_attribute("data-prob"))
            for row in result.find_elements(By.CSS_SELECTOR, ".bar-row")
        }
        assert bars == api["probs"]
        widths = [
            row.find_element(By.CSS_SELECTOR, ".bar > span").size["width"]
            for row in result.find_elements(By.CSS_SELECTOR, ".bar-row")
        ]
        assert widths == sorted(widths, reverse=True) and widths[0] > 0  # drawn, longest bar first
        browser.save_screenshot(str(tmp_path / "classify.png"))
        assert (tmp_path / "classify.png").stat().st_size > 1000


def test_the_page_highlights_entities_coloured_by_type_with_a_legend(browser, tagger, tmp_path):
    from selenium.webdriver.common.by import By

    text = "吴敏昨天去苏州参加了星光科技公司的年会。"
    with page_and_api(browser, tagger, tmp_path, text) as (result, api):
        assert result.get_attribute("data-kind") == "entities"
        doc = browser.find_element(By.ID, "doc")
        marks = doc.find_elements(By.TAG_NAME, "mark")
        shown = [
            (int(m.get_attribute("data-start")), int(m.get_attribute("data-end")), m.get_attribute("data-type"))
            for m in marks
        ]
        expected, at = [], 0  # the page shows non-overlapping entities in text order
        for e in sorted(api["entities"], key=lambda e: e["start"]):
            if e["start"] >= at:
                expected.append((e["start"], e["end"], e["type"]))
                at = e["end"]
        assert shown == expected and expected  # a sentence from the training data: the tagger finds entities
        # the text reads as the input once the type labels are taken out
        assert (
            browser.execute_script(
                "const d = document.getElementById('doc').cloneNode(true);"
                " d.querySelectorAll('sub').forEach(s => s.remove()); return d.textContent;"
            )
            == text
        )
        legend = [s.text for s in result.find_elements(By.CSS_SELECTOR, ".legend span")]
        assert sorted(legend) == ["LOC", "ORG", "PER"]
        colours = {m.get_attribute("data-type"): m.value_of_css_property("background-color") for m in marks}
        assert len(set(colours.values())) == len(colours)  # one colour per type
        browser.save_screenshot(str(tmp_path / "ner.png"))
        assert (tmp_path / "ner.png").stat().st_size > 1000


def test_the_page_fills_in_masks_and_lists_each_ones_top_tokens(browser, pretrained, tmp_path):
    from selenium.webdriver.common.by import By

    text = "质量[MASK][MASK]差，不推荐"
    with page_and_api(browser, str(pretrained), tmp_path, text) as (result, api):
        assert result.get_attribute("data-kind") == "fill-mask"
        filled = browser.find_element(By.ID, "filled")
        assert [m.text for m in filled.find_elements(By.TAG_NAME, "mark")] == [m[0]["token"] for m in api["masks"]]
        for i, top in enumerate(api["masks"]):
            rows = browser.find_element(By.ID, f"mask-{i}").find_elements(By.CSS_SELECTOR, ".bar-row")
            assert [(r.get_attribute("data-token"), float(r.get_attribute("data-prob"))) for r in rows] == [
                (t["token"], t["score"]) for t in top
            ]
        browser.save_screenshot(str(tmp_path / "fill-mask.png"))
        assert (tmp_path / "fill-mask.png").stat().st_size > 1000


def test_the_public_predictor_answers_records_as_predict_answers_a_file(classifier, tagger, tmp_path):
    """``ernie_ft.Predictor``, the Python API the server builds on: records in memory, predict's records out."""
    from ernie_ft import Predictor
    from ernie_ft.errors import UserError

    for model_dir, inputs in ((classifier, CLASSIFY_INPUTS), (tagger, NER_INPUTS)):
        predictor = Predictor(str(model_dir), engine="dygraph", device="cpu", batch_size=4)
        assert_same_records(predictor(inputs), predicted_by_cli(str(model_dir), inputs, tmp_path))
    with pytest.raises(UserError, match=r"^inputs\[1\]\.text: "):
        predictor([{"text": "张三"}, {"text": "  "}])


INT8_ERROR = 0.1
"""The bound on int8's outputs, relative to the largest fp32 output of the same window. Dynamic quantization rounds
each weight to a per-tensor step s_w = max|W| / 127 and each activation to s_a = (max - min) / 255 of its batch;
with rounding errors uniform and independent, a dot product's relative error is about
(s_w / rms(W) + s_a / rms(a)) / sqrt(12). Gaussian-like weights of a few hundred thousand entries have
max / rms of about 4.5, activations (max - min) / rms of about 9: 2 x 0.035 / 3.46 = 0.02 per matrix product.
Six products per layer in two layers (scratch:tiny), adding in quadrature through the residual stream:
sqrt(12) x 0.02 = 0.07, rounded up to 0.1. Labels must then agree wherever fp32's margin between the two best
outputs exceeds twice the bound."""


def assert_int8_within_bound(fp32, int8):
    """int8 outputs (``Predictor.logits``: an array, or one array per window) within ``INT8_ERROR`` of fp32's."""
    for exact, quantized in zip(fp32, int8):
        exact, quantized = np.asarray(exact), np.asarray(quantized)
        scale = np.abs(exact).max()
        assert np.abs(quantized - exact).max() <= INT8_ERROR * scale, (np.abs(quantized - exact).max(), scale)
        top2 = np.sort(exact, axis=-1)[..., -2:]
        clear = (top2[..., 1] - top2[..., 0]) > 2 * INT8_ERROR * scale
        assert (exact.argmax(-1) == quantized.argmax(-1))[clear].all()


@pytest.mark.parametrize(
    "fixture,inputs", [("classifier", CLASSIFY_INPUTS), ("tagger", NER_INPUTS), ("reader", QA_INPUTS)]
)
def test_an_onnx_export_predicts_what_the_checkpoint_predicts(fixture, inputs, request, tmp_path, capsys):
    """export --format onnx: ONNX Runtime in fp32 gives dygraph's records (probabilities to 1e-4; the CRF decodes
    outside the graph); --quantize int8 (an export of its own, holding the int8 model alone): its outputs stay within
    ``INT8_ERROR`` of fp32's; --engine auto prefers int8, and the server names the engine and the precision."""
    from ernie_ft import Predictor
    from ernie_ft.cli import main
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    model_dir = str(request.getfixturevalue(fixture))
    exported, quantized = tmp_path / "onnx", tmp_path / "int8"
    assert main(["export", "--model", model_dir, "--output", str(exported), "--format", "onnx"]) == 0
    out = capsys.readouterr().out
    assert "ONNX Runtime fusions: " in out and "SkipLayerNormalization x4" in out and "MultiHeadAttention x2" in out, (
        out
    )
    command = ["export", "--model", model_dir, "--output", str(quantized), "--format", "onnx", "--quantize", "int8"]
    assert main(command) == 0
    out = capsys.readouterr().out
    assert "runs it with ONNX Runtime in int8" in out and (quantized / "model.int8.onnx").is_file()
    assert not (quantized / "model.onnx").exists()
    reference = predicted_by_cli(model_dir, inputs, tmp_path, "--engine", "dygraph")
    assert _close(predicted_by_cli(str(exported), inputs, tmp_path, "--engine", "onnxruntime"), reference)

    fp32, int8 = Predictor(str(exported), "onnxruntime", "cpu"), Predictor(str(quantized), "onnxruntime-int8", "cpu")
    examples, features = fp32.prepare(inputs)
    assert_int8_within_bound(fp32.logits(features, 8), int8.logits(features, 8))
    assert predicted_by_cli(str(quantized), inputs, tmp_path) == predicted_by_cli(
        str(quantized), inputs, tmp_path, "--engine", "onnxruntime-int8"
    )
    info = ServedModel(str(quantized), "auto", "cpu").info(Limits())
    assert (info["engine"], info["precision"]) == ("onnxruntime", "int8")


def test_auto_picks_int8_onnx_then_onnx_then_paddle_inference_then_dygraph(tmp_path):
    from ernie_ft.inference.predict import _engine

    picked = []
    for name in (None, "inference.json", "model.onnx", "model.int8.onnx"):
        if name:
            (tmp_path / name).write_text("")
        picked.append(_engine(str(tmp_path), "auto"))
    assert picked == ["dygraph", "inference", "onnxruntime", "onnxruntime-int8"]
    assert _engine(str(tmp_path), "onnxruntime") == "onnxruntime"  # a named engine is taken as named


def test_serve_export_int8_writes_the_int8_model_beside_the_checkpoint_once(classifier, tmp_path, capsys):
    """serve --export int8: DIR-int8 beside the checkpoint, made once and reused while newer than the checkpoint."""
    from ernie_ft.serving import exported_model
    from ernie_ft.serving.model import ServedModel

    checkpoint = tmp_path / "run"
    shutil.copytree(classifier, checkpoint)
    first = exported_model(str(checkpoint), False, None, "int8")
    assert first.endswith("-int8") and os.path.isfile(os.path.join(first, "model.int8.onnx"))
    assert "for ONNX Runtime int8 (--export)" in capsys.readouterr().out
    assert exported_model(str(checkpoint), False, None, "int8") == first
    assert "using the export in" in capsys.readouterr().out
    served = ServedModel(first, "auto", "cpu")
    assert served.engine == "onnxruntime-int8"
    from ernie_ft.serving.app import Service
    from ernie_ft.serving.limits import Limits

    assert Service(served, Limits()).limits.forward_batch_size == 4  # ONNX Runtime's cheapest pass on a CPU


def test_static_int8_calibrates_on_the_training_texts_or_a_named_file(classifier, tmp_path, capsys):
    """--quantize int8-static: ranges from the run's training file by default, or from --calibrate; the outputs
    stay within the bound that dynamic quantization meets (static rounds activations to ranges seen in
    calibration, the same step size for windows like those)."""
    from ernie_ft import Predictor
    from ernie_ft.cli import main

    calibration = tmp_path / "calibration.txt"
    calibration.write_text("房间很干净，服务也好\n太差了，不会再来\n早餐一般，位置不错\n", encoding="utf-8")
    assert main(["export", "--model", classifier, "--output", str(tmp_path / "fp32"), "--format", "onnx"]) == 0
    fp32 = Predictor(str(tmp_path / "fp32"), "onnxruntime", "cpu")
    for extra, source in (((), "sentiment_train.tsv"), (("--calibrate", str(calibration)), "calibration.txt")):
        exported = tmp_path / f"static-{source}"
        command = ["export", "--model", classifier, "--output", str(exported), "--format", "onnx"]
        assert main([*command, "--quantize", "int8-static", *extra]) == 0
        assert "static quantization calibrated on " in capsys.readouterr().out
        manifest = json.loads((exported / "onnx.json").read_text())
        assert manifest["files"]["model.int8.onnx"]["calibration"].endswith(f" of {source}")
        int8 = Predictor(str(exported), "onnxruntime-int8", "cpu")
        examples, features = fp32.prepare(CLASSIFY_INPUTS)
        assert_int8_within_bound(fp32.logits(features, 8), int8.logits(features, 8))
    # the ranges come from the texts named: the two calibrations give the activations other scales (the weights'
    # scales are left out: their names count the models built in this process)
    import onnx

    scales = [
        {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(d / "model.int8.onnx")).graph.initializer
         if t.name.endswith("_scale") and not t.name.endswith(".w_0_scale")}
        for d in (tmp_path / "static-sentiment_train.tsv", tmp_path / "static-calibration.txt")
    ]  # fmt: skip
    assert scales[0].keys() == scales[1].keys() and len(scales[0]) >= 10, scales
    assert any(not np.array_equal(scales[0][name], scales[1][name]) for name in scales[0])


def test_onnx_export_refusals_are_one_error_line_and_write_nothing(
    classifier, pretrained, tmp_path, capsys, monkeypatch
):
    from ernie_ft.cli import main

    def refused(*args, match):
        output = tmp_path / "out"
        assert main(["export", "--model", args[0], "--output", str(output), *args[1:]]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("error: ") and match in err, err
        assert not output.exists() and not (tmp_path / "out.tmp").exists()

    refused(str(pretrained), "--format", "onnx", match="a pretraining (fill-mask) checkpoint is not exported")
    refused(classifier, "--quantize", "int8", match="--quantize makes an int8 ONNX model: add --format onnx")
    refused(classifier, "--format", "onnx", "--calibrate", classifier, match="--calibrate is for static")
    refused(
        classifier,
        "--format",
        "onnx",
        "--quantize",
        "int8-static",
        "--calibration",
        str(tmp_path / "none.txt"),
        match=f"--calibrate {tmp_path / 'none.txt'}: no such file",
    )
    moved = tmp_path / "moved"  # a run whose training file is gone: static quantization needs --calibrate
    shutil.copytree(classifier, moved)
    run_file = moved / "best" / "ernie_ft.yaml" if (moved / "best").is_dir() else moved / "ernie_ft.yaml"
    run_file.write_text(run_file.read_text().replace(str(DATA / "sentiment_train.tsv"), "/nowhere/train.tsv"))
    refused(str(moved), "--format", "onnx", "--quantize", "int8-static", match="pass --calibrate FILE")

    import builtins

    real_import = builtins.__import__

    def no_sympy(name, *args, **kwargs):
        if name == "sympy":
            raise ImportError("No module named 'sympy'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sympy)  # ONNX Runtime's optimizer needs it
    refused(classifier, "--format", "onnx", match="--format onnx needs sympy for ONNX Runtime's optimizer: pip install")


def test_an_onnx_file_that_does_not_belong_to_the_checkpoint_is_refused(classifier, tagger, tmp_path, capsys):
    """onnx.json records each ONNX file's hash and the weights': a model.onnx copied in from another export, or
    weights replaced beside it, is one error line instead of another model's answers."""
    from ernie_ft.cli import main

    inputs = tmp_path / "in.txt"
    inputs.write_text("房间很干净\n", encoding="utf-8")
    for name, model in (("cls", classifier), ("ner", tagger)):
        assert main(["export", "--model", model, "--output", str(tmp_path / name), "--format", "onnx"]) == 0
    capsys.readouterr()

    def refused(directory, engine, match):
        assert main(["predict", "--model", str(directory), "--input", str(inputs), "--engine", engine]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("error: ") and match in err, err

    shutil.copy(tmp_path / "ner" / "model.onnx", tmp_path / "cls" / "model.onnx")
    refused(tmp_path / "cls", "onnxruntime", "model.onnx does not belong to the checkpoint beside it")
    shutil.copy(tmp_path / "ner" / "onnx.json", tmp_path / "cls" / "onnx.json")  # the hashes now match the file...
    refused(tmp_path / "cls", "auto", "does not belong")  # ...but not the weights beside it
    (tmp_path / "cls" / "onnx.json").unlink()
    refused(tmp_path / "cls", "onnxruntime", "model.onnx has no record in onnx.json")
    refused(tmp_path / "ner", "onnxruntime-int8", "no model.int8.onnx for --engine onnxruntime-int8")


def test_onnx_runtime_missing_is_one_error_line_with_the_install_command(classifier, monkeypatch):
    import builtins

    from ernie_ft.errors import UserError
    from ernie_ft.inference.onnx import OnnxModel

    real_import = builtins.__import__

    def no_onnxruntime(name, *args, **kwargs):
        if name == "onnxruntime":
            raise ImportError("No module named 'onnxruntime'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnxruntime)
    with pytest.raises(UserError, match=r"^--engine onnxruntime needs ONNX Runtime: pip install onnxruntime$"):
        OnnxModel(classifier)
