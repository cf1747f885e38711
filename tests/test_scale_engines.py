"""Ray Data and Spark answer with ``ernie_ft.Predictor`` as ``predict`` does, row for row (issue 58, item 4).

docs/deployment.md's two examples, docs/examples/scale/ (copied into the page, tests/test_docs.py keeps the copies
equal), run here as they are on an int8 export and a Parquet file of ids and texts, in .venv-scale: the runtime
(``pip install .`` without extras, no Paddle) with ray[data], pyspark and pandas<3 beside it, which scripts/test.sh
makes (never dependencies of the package). Ray starts on this machine with two actors and a CPU left for its own
read, repartition and write tasks; Spark on local[2], with Java. Both bind 127.0.0.1 only, and each answer (label,
probabilities within 1e-6) is the one ``predict`` writes for its id in the full install. Without the venv or Java
the tests skip, saying so; in CI (CI=true) they fail.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import DATA, ROOT
from test_serve import train

from ernie_ft import Predictor
from ernie_ft.cli import main as cli

SCALE = ROOT / ".venv-scale"
SCALE_PYTHON = SCALE / "bin" / "python"
EXAMPLES = ROOT / "docs" / "examples" / "scale"


def unavailable(reason: str):
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI: the Ray and Spark tests cannot run: {reason}", pytrace=False)
    pytest.skip(f"Ray and Spark tests not run: {reason}")


@pytest.fixture(scope="module")
def engines_python() -> str:
    """.venv-scale's python, after checking that it has Ray and PySpark and no Paddle, and runs the checkout's
    ernie_ft with PYTHONPATH as ``run_example`` sets it; else skip (CI: fail)."""
    if not SCALE_PYTHON.is_file():
        unavailable(f"{SCALE} is missing (scripts/test.sh makes it: the runtime with ray[data] and pyspark)")
    code = "import ray, pyspark, ernie_ft, importlib.util as u; print(u.find_spec('paddle'), u.find_spec('paddlenlp'))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    found = subprocess.run([SCALE_PYTHON, "-c", code + "; print(ernie_ft.__file__)"], capture_output=True, text=True,
                           timeout=300, env=env)  # fmt: skip
    if found.returncode != 0:
        unavailable(f"{SCALE} cannot import ray and pyspark ({found.stderr.strip()[-300:]}): run scripts/test.sh")
    assert found.stdout.split() == ["None", "None", str(ROOT / "ernie_ft" / "__init__.py")], found.stdout
    return str(SCALE_PYTHON)


@pytest.fixture(scope="module")
def int8_export(tmp_path_factory) -> str:
    """A tiny classifier, trained for an epoch, exported to int8 ONNX."""
    run = train(tmp_path_factory, "classify", "--train", str(DATA / "sentiment_train.tsv"), "--max-len", "64")
    out = tmp_path_factory.mktemp("export") / "int8"
    assert cli(["export", "--model", run, "--output", str(out), "--format", "onnx", "--quantize", "int8"]) == 0
    return str(out)


@pytest.fixture(scope="module")
def reviews(tmp_path_factory) -> str:
    """A Parquet file of 40 reviews with ids that are not their positions."""
    lines = (DATA / "sentiment_train.tsv").read_text(encoding="utf-8").splitlines()[1:41]
    texts = [line.split("\t")[1] for line in lines]
    path = tmp_path_factory.mktemp("reviews") / "reviews.parquet"
    pq.write_table(pa.table({"id": [1000 + 7 * i for i in range(len(texts))], "text": texts}), path)
    return str(path)


@pytest.fixture(scope="module")
def predicted(int8_export, reviews, tmp_path_factory) -> dict:
    """``predict``'s answer for each id of ``reviews``, in the full install."""
    out = tmp_path_factory.mktemp("predicted") / "answers.jsonl"
    assert cli(["predict", "--model", int8_export, "--input", reviews, "--output", str(out)]) == 0
    return {answer["id"]: answer for answer in map(json.loads, out.read_text(encoding="utf-8").splitlines())}


def run_example(name: str, engines_python: str, model_dir: str, reviews: str, out, **env) -> list[dict]:
    """docs/examples/scale/``name`` run by ``engines_python`` on the checkout's ernie_ft; the rows it wrote."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    command = [engines_python, str(EXAMPLES / name), model_dir, reviews, str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=out.parent,
                            env=env, start_new_session=True)  # fmt: skip
    try:
        _, stderr = proc.communicate(timeout=400)
    finally:  # a driver killed on time out leaves some of Ray's processes behind: its whole group goes
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stderr[-3000:]
    return pq.read_table(out).to_pylist()


def assert_answered_as_predict(rows: list[dict], predicted: dict) -> None:
    assert sorted(row["id"] for row in rows) == sorted(predicted)
    for row in rows:
        expected = predicted[row["id"]]
        probs = dict(row["probs"])  # Ray writes a struct (a dict), Spark a map (a list of pairs)
        assert (row["text"], row["label"], sorted(probs)) == (expected["text"], expected["label"],
                                                             sorted(expected["probs"])), row  # fmt: skip
        assert all(abs(probs[label] - p) <= 1e-6 for label, p in expected["probs"].items()), (row, expected)


def test_a_predictor_answers_a_batch_without_calling_itself(int8_export, predicted):
    """Ray Data runs a callable class as a subclass whose ``__call__`` hands the call to the actor's one thread and
    waits for it: a Predictor that answered a batch by calling itself again waited for itself for ever there."""
    import pandas as pd

    class OneCallAtATime(Predictor):
        busy = False

        def __call__(self, batch):
            assert not self.busy, "the Predictor called itself"
            self.busy = True
            try:
                return super().__call__(batch)
            finally:
                self.busy = False

    some = dict(list(predicted.items())[:3])
    batch = pd.DataFrame({"id": list(some), "text": [answer["text"] for answer in some.values()]})
    assert_answered_as_predict(OneCallAtATime(int8_export)(batch).to_dict("records"), some)


def test_ray_data_answers_as_predict(engines_python, int8_export, reviews, predicted, tmp_path):
    """ray_predict.py: two actors of map_batches answer each review as predict does."""
    ray_tmp = tempfile.mkdtemp(prefix="ray")  # short: Ray's socket paths must fit in 107 bytes
    try:
        rows = run_example(
            "ray_predict.py", engines_python, int8_export, reviews, tmp_path / "answered",
            RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0",
            RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # Ray's switch to 127.0.0.1 for its addresses
        )  # fmt: skip
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert_answered_as_predict(rows, predicted)


def test_spark_answers_as_predict(engines_python, int8_export, reviews, predicted, tmp_path):
    """spark_predict.py on local[2]: the pandas UDF answers each review as predict does."""
    if shutil.which("java") is None:
        unavailable("no Java runtime (java) for Spark")
    submit = "--master local[2] --conf spark.ui.enabled=false --conf spark.driver.bindAddress=127.0.0.1"
    rows = run_example(
        "spark_predict.py", engines_python, int8_export, reviews, tmp_path / "answered",
        PYSPARK_PYTHON=engines_python,  # else Spark's workers run the system's python
        PYSPARK_SUBMIT_ARGS=f"{submit} --conf spark.driver.host=127.0.0.1 pyspark-shell", SPARK_LOCAL_IP="127.0.0.1",
    )  # fmt: skip
    assert_answered_as_predict(rows, predicted)
