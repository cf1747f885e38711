"""``POST /v1/predict`` takes a record under the keys ``ernie_ft.Predictor`` takes it under: a classifier's text as
``text_a`` or ``sentence`` and its pair as ``text_b`` (``Predictor.input_names``, asked of the task's reader), with
the same limits, while a key the task does not read stays refused."""

from test_predict_stream import CLASSIFIER, TAGGER
from test_serve import ReadyClient

A, B = "房间很干净，早餐也不错", "服务员态度一般"


def served(model):
    from ernie_ft.serving.model import ServedModel

    return ServedModel(model, "dygraph", "cpu", trust_pickle=True)


def test_v1_predict_takes_the_keys_the_predictor_takes():
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.limits import Limits

    model = served(CLASSIFIER)
    names = model.input_names()
    assert names["text"][:3] == ("text", "text_a", "sentence") and names["text_pair"][:2] == ("text_pair", "text_b")
    records = [{"text_a": A, "text_b": B}, {"sentence": A}, {"sentence1": A, "sentence2": B}, {"text": A}]
    with ReadyClient(create_app(model, Limits(max_chars=20))) as client:
        for record in records:
            response = client.post("/v1/predict", json={"inputs": [record]})
            assert response.status_code == 200, (record, response.text)
            (answer,), (expected,) = response.json()["predictions"], model([record])
            assert (answer["text"], answer.get("text_pair"), answer["label"]) == (
                expected["text"],
                expected.get("text_pair"),
                expected["label"],
            )
        too_long = client.post("/v1/predict", json={"inputs": [{"text_a": "好" * 21}]})  # the limits hold
        assert too_long.status_code == 422 and too_long.json()["error"]["field"] == "inputs[0].text_a", too_long.text
        unread = client.post("/v1/predict", json={"inputs": [{"text": A, "label": "正面"}]})
        assert unread.status_code == 422 and unread.json()["error"]["field"] == "inputs[0].label"


def test_a_task_that_reads_one_key_takes_that_one():
    assert served(TAGGER).input_names() == {"text": ("text",)}  # NER reads "text" alone, as its Predictor does
