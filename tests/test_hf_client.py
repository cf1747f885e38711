"""Hugging Face's own client talks to ``serve``: ``huggingface_hub.InferenceClient(model=URL)`` gets, on ``POST /``,
answers it parses for text classification, token classification and question answering, equal to ``/v1/predict``'s
predictions; the parameters newer clients send are taken, an unknown one is a 422 naming it."""

import socket
import threading
import time

import httpx
import pytest
from conftest import DATA
from huggingface_hub import InferenceClient, QuestionAnsweringOutputElement, TextClassificationOutputElement

from ernie_ft.cli import task_command

TEXT = "房间很干净，服务也好"
NER_TEXT = "吴敏昨天去苏州参加了星光科技公司的年会。"
QUESTION, CONTEXT = "灯塔是哪一年建成的？", "白沙角灯塔建于1903年，塔高三十六米。"
COMMON = ["--model", "scratch:tiny", "--epochs", "1", "--threads", "1", "--seed", "1", "--max-len", "64"]


def trained(tmp_path_factory, task: str, *args) -> str:
    out = tmp_path_factory.mktemp(task) / "run"
    assert task_command(task)([*COMMON, *args, "--output", str(out)]) == 0
    return str(out)


class Served:
    """``serve``'s application for a model directory (as ``serve`` builds it: ``ServedModel`` and ``create_app``) in
    uvicorn on a thread, on a port the system gave; ``url`` once /readyz answers 200."""

    def __init__(self, model_dir: str):
        import uvicorn

        from ernie_ft.serving.app import create_app
        from ernie_ft.serving.model import ServedModel

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        app = create_app(ServedModel(model_dir, "dygraph", "cpu"))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self._ready():
            assert time.monotonic() < deadline and self.thread.is_alive(), "the server did not get ready"
            time.sleep(0.05)

    def _ready(self) -> bool:
        try:
            return httpx.get(self.url + "/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def predictions(self, inputs: list) -> list:
        return httpx.post(self.url + "/v1/predict", json={"inputs": inputs}, timeout=60).json()["predictions"]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)
        self.sock.close()


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    model = trained(tmp_path_factory, "classify", "--train", str(DATA / "sentiment_train.tsv"), "--batch-size", "64")
    served = Served(model)
    yield served
    served.stop()


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    args = ["--train", str(DATA / "ner_train.jsonl"), "--epochs", "3", "--batch-size", "16", "--lr", "3e-3"]
    served = Served(trained(tmp_path_factory, "ner", *args))
    yield served
    served.stop()


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    args = ["--train", str(DATA / "qa_train.json"), "--doc-stride", "16", "--batch-size", "64"]
    served = Served(trained(tmp_path_factory, "qa", *args))
    yield served
    served.stop()


def test_text_classification_gets_every_label_with_predicts_scores(classifier):
    client = InferenceClient(model=classifier.url)
    answer = client.text_classification(TEXT)
    probs = classifier.predictions([TEXT])[0]["probs"]
    assert all(isinstance(a, TextClassificationOutputElement) for a in answer)
    assert [a.label for a in answer] == sorted(probs, key=lambda k: -probs[k])  # every label, highest first
    assert {a.label: a.score for a in answer} == probs
    # the body newer clients send, with parameters; parsed as they parse it (the first list: the text's)
    raw = client.post(json={"inputs": TEXT, "parameters": {"top_k": 1, "function_to_apply": "softmax"}})
    (top,) = TextClassificationOutputElement.parse_obj_as_list(raw)[0]
    assert (top.label, top.score) == (answer[0].label, answer[0].score)
    two = httpx.post(classifier.url, json={"inputs": [TEXT, "太差了"]}).json()
    assert len(two) == 2 and two[0] == [{"label": a.label, "score": a.score} for a in answer]


@pytest.mark.parametrize(
    "parameters, field, says",
    [
        ({"temperature": 0.5}, "parameters.temperature", "unknown parameter; text-classification takes top_k, "),
        ({"top_k": 0}, "parameters.top_k", "give a whole number, 1 or more"),
        ({"function_to_apply": "sigmoid"}, "parameters.function_to_apply", "this model's scores are softmax"),
        ([1], "parameters", "got a list, not an object"),
    ],
)
def test_a_parameter_the_server_cannot_honour_is_a_422_naming_it(classifier, parameters, field, says):
    answer = httpx.post(classifier.url, json={"inputs": TEXT, "parameters": parameters})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == field and says in error["message"], error
    ours = httpx.post(classifier.url + "/v1/predict", json={"inputs": TEXT, "parameters": {"top_k": 1}})
    assert ours.status_code == 422 and ours.json()["error"]["field"] == "parameters.top_k"  # Hugging Face's: POST /


def test_token_classification_gets_predicts_entities(tagger):
    client = InferenceClient(model=tagger.url)
    answer = client.token_classification(NER_TEXT)
    entities = tagger.predictions([NER_TEXT])[0]["entities"]
    assert entities, "the tagger found no entity: the test would compare nothing"
    assert [(a.entity_group, a.word, a.start, a.end, a.score) for a in answer] == [
        (e["type"], e["text"], e["start"], e["end"], e["score"]) for e in entities
    ]
    assert all(NER_TEXT[a.start : a.end] == a.word for a in answer)
    kept = httpx.post(tagger.url, json={"inputs": NER_TEXT, "parameters": {"ignore_labels": [entities[0]["type"]]}})
    assert [e["entity_group"] for e in kept.json()] == [e["type"] for e in entities if e["type"] != entities[0]["type"]]


def test_question_answering_gets_predicts_answer_in_both_client_shapes(reader):
    client = InferenceClient(model=reader.url)
    answer = client.question_answering(question=QUESTION, context=CONTEXT)  # 0.25: question and context at the top
    expected = reader.predictions([{"question": QUESTION, "context": CONTEXT}])[0]
    assert isinstance(answer, QuestionAnsweringOutputElement)
    assert (answer.answer, answer.start) == (expected["answer"], max(expected["start"], 0))  # no answer: "" at 0
    assert answer.score == expected["probability"]
    assert CONTEXT[answer.start : answer.end] == answer.answer
    # newer clients: {"inputs": {...}, "parameters": {...}}; top_k answers a list
    raw = client.post(json={"inputs": {"question": QUESTION, "context": CONTEXT}, "parameters": {"top_k": 2}})
    best = QuestionAnsweringOutputElement.parse_obj_as_list(raw)
    assert [(b.answer, b.start) for b in best] == [(b["text"], b["start"]) for b in expected["n_best"][:2]]
