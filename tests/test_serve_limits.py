"""``serve``'s limits bound a ``/v1/predict`` request: one over ``--max-inputs``, ``--max-chars`` or
``--max-body-bytes`` is refused with the status and the field, and the server's peak memory for a request at the
limits grows with what the limits allow, not more."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
from conftest import DATA

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "v0.1"
CLASSIFIER = str(FIXTURES / "classify")
MAX_INPUTS, MAX_CHARS = 16, 5_000
BYTES_PER_CHAR = 640
"""The most the server's peak memory may grow per character a request holds. Measured on the v0.1 classifier
(max_len 32: a window per 30 characters) on a Xeon @ 2.50GHz: 16 texts of 5,000 characters grew it by 35 MB, 440
bytes a character (the texts' encodings, ~170 windows a text and their outputs, held together until answered);
the v0.1 tagger 780 bytes (64 x 20,000 characters: +1.0 GB). The windows themselves are ~2 MB of the 35: three
more copies of them kept (planted) stay under the bound; it catches what grows by half again per character."""


def text(n: int, i: int) -> str:
    """A text of ``n`` characters from the sample reviews, ending in ``i`` so that no two are alike."""
    reviews = "".join(
        json.loads(line)["text"] for line in (DATA / "sentiment_test.jsonl").read_text("utf-8").splitlines()
    )
    body = (reviews * (n // len(reviews) + 1))[: n - len(str(i))]
    return body + str(i)


class Server:
    """``serve --port 0`` in its own process, so that its peak memory (VmHWM) is its own."""

    def __init__(self, tmp_path, *extra):
        self.log = open(tmp_path / "serve.log", "w+")
        command = [sys.executable, "-m", "ernie_ft", "serve", "--model", CLASSIFIER, "--port", "0", "--device", "cpu"]
        self.proc = subprocess.Popen([*command, "--trust-pickle", *extra], stdout=self.log, stderr=self.log)
        self.url = None

    def wait_ready(self, seconds: float = 300) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            found = re.search(r"^serving .* on (http://127\.0\.0\.1:\d+)/$", self.output(), re.MULTILINE)
            try:
                if found and httpx.get(found[1] + "/readyz", timeout=2).status_code == 200:
                    self.url = found[1]
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError("not ready: " + self.output())

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def peak_kib(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+)", status)[1])

    def post(self, body) -> httpx.Response:
        return httpx.post(self.url + "/v1/predict", json=body, timeout=600)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def test_a_request_at_the_limits_is_answered_in_memory_the_limits_bound_and_one_over_them_refused(tmp_path):
    body_limit = 4 * MAX_INPUTS * MAX_CHARS  # UTF-8: 3 bytes a character, and the JSON around them
    server = Server(
        tmp_path, "--max-inputs", str(MAX_INPUTS), "--max-chars", str(MAX_CHARS), "--max-body-bytes", str(body_limit)
    )
    try:
        server.wait_ready()
        short = server.post({"inputs": [text(20, i) for i in range(MAX_INPUTS)]})
        assert short.status_code == 200, short.text
        before = server.peak_kib()
        full = server.post({"inputs": [text(MAX_CHARS, i) for i in range(MAX_INPUTS)]})
        assert full.status_code == 200 and len(full.json()["predictions"]) == MAX_INPUTS, full.text[:500]
        grown = (server.peak_kib() - before) * 1024
        assert 0 < grown < BYTES_PER_CHAR * MAX_INPUTS * MAX_CHARS, (grown, server.output()[-2000:])

        over = server.post({"inputs": [text(20, i) for i in range(MAX_INPUTS + 1)]})
        assert over.status_code == 422
        assert over.json()["error"] == {
            "field": "inputs",
            "message": f"{MAX_INPUTS + 1} inputs; at most {MAX_INPUTS} in one request (serve --max-inputs)",
        }
        too_long = server.post({"inputs": [text(20, 0), text(MAX_CHARS + 1, 1)]})
        assert too_long.status_code == 422 and too_long.json()["error"]["field"] == "inputs[1]"
        assert str(MAX_CHARS) in too_long.json()["error"]["message"]
        too_big = server.post({"inputs": [text(MAX_CHARS, i) for i in range(MAX_INPUTS)], "pad": "x" * body_limit})
        assert too_big.status_code == 413 and too_big.json()["error"]["field"] == "body"
        assert str(body_limit) in too_big.json()["error"]["message"]
    finally:
        server.stop()


def test_a_request_is_answered_a_group_of_at_most_max_chars_at_a_time(monkeypatch):
    """The inputs of one request are prepared and run in consecutive groups of at most --max-chars characters, so
    that what a request holds at once is bounded by the limit whatever --max-inputs allows; the answers are those of
    the whole request at once, and a refused input is named by its index in the request."""
    from test_serve import ReadyClient

    from ernie_ft.errors import UserError
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    texts = [text(40, i) for i in range(10)]
    answers, prepared = {}, []
    for max_chars in (100, 1_000):
        served = ServedModel(CLASSIFIER, "dygraph", "cpu", trust_pickle=True)
        if max_chars == 100:

            def spy(inputs, real=served.prepare):  # a field the task's reader refuses: named by its group's index
                prepared.append(inputs)
                for i, record in enumerate(inputs):
                    if record["text"].startswith("拒"):
                        raise UserError(f"inputs[{i}].text: the task refuses this text")
                return real(inputs)

            monkeypatch.setattr(served, "prepare", spy)
        with ReadyClient(create_app(served, Limits(max_chars=max_chars, max_inputs=16))) as client:
            prepared.clear()  # the warm-up's
            answer = client.post("/v1/predict", json={"inputs": texts})
            assert answer.status_code == 200, answer.text
            answers[max_chars] = answer.json()["predictions"]
            if max_chars == 100:
                assert [len(group) for group in prepared] == [2] * 5  # 40 + 40 characters; a third would be 120
                assert all(sum(len(record["text"]) for record in group) <= 100 for group in prepared)
                bad = client.post("/v1/predict", json={"inputs": [*texts[:7], "拒" + texts[7], *texts[8:]]})
                assert bad.status_code == 422 and bad.json()["error"]["field"] == "inputs[7].text", bad.text
    assert answers[100] == answers[1_000]
