"""ernie_ft against Hugging Face transformers, both directions, per checkpoint kind: the table in docs/huggingface.md.

    .venv/bin/python benchmarks/baselines/hf_parity.py --torch-python /work/venv-torch/bin/python

In: each transformers checkpoint of tests/fixtures/hf loaded by ernie_ft, its ids and outputs against what
transformers recorded (expected.json). Out: the same checkpoint exported by ``python -m ernie_ft export --format hf``
and loaded by transformers (hf_reference.py beside this file, in the torch venv): its tokenizer's ids and its
outputs against ernie_ft's on the same ids. Differences are the largest absolute difference of any output (logits,
hidden states).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from hf_outputs import CLASSES, max_difference, outputs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT / "tests" / "fixtures" / "hf"
TEXTS = ["这家酒店的服务很好", "房间太小了，不推荐。", "北京的天气不错", "我在上海工作"]
QA = [["谁在上海工作", "我在上海工作"], ["天气怎么样", "北京的天气不错"]]


def ours(kind: str, record: dict):
    import paddlenlp.transformers as pt

    from ernie_ft.models import hf

    cls_name, head = CLASSES[kind]
    net, _ = hf.load(getattr(pt, cls_name), str(FIXTURES / kind), head)
    return outputs(net, record)


def our_ids(kind: str, record: dict) -> bool:
    """Whether ernie_ft's tokenizer for the checkpoint gives the ids transformers gave (padding left out)."""
    from ernie_ft.text.pipeline import TextPipeline

    pipeline = TextPipeline.from_dir(str(FIXTURES / kind))
    for row, mask, text in zip(record["input_ids"], record["attention_mask"], QA if kind == "bert-qa" else TEXTS):
        ids = [pipeline.cls_id]
        for part in [text] if isinstance(text, str) else text:
            ids += [*pipeline.encode(part).ids, pipeline.sep_id]
        if [i for i, m in zip(row, mask) if m] != ids:
            return False
    return True


def out_direction(kind: str, work: Path, torch_python: str) -> tuple[bool, float]:

    from ernie_ft.inference.export import export

    target = work / kind
    export(str(FIXTURES / kind), str(target), overwrite=True, format="hf")
    texts = work / f"{kind}.json"
    texts.write_text(json.dumps(QA if kind == "bert-qa" else TEXTS, ensure_ascii=False), encoding="utf-8")
    command = [torch_python, str(HERE / "hf_reference.py"), "--model", str(target), "--texts", str(texts)]
    command += ["--pairs"] if kind == "bert-qa" else []
    theirs = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    expected = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))["kinds"][kind]
    same_ids = theirs["input_ids"] == expected["input_ids"]
    record = {**theirs, "token_type_ids": expected["token_type_ids"]}
    return same_ids, max_difference(ours(kind, record), record)


TRAINED = {  # task: (training flags, the texts compared, pairs)
    "classify": (
        ["--train", "data/sentiment_train.tsv", "--dev", "data/sentiment_dev.tsv"],
        "sentiment_dev.tsv",
        False,
    ),
    "ner": (["--train", "data/ner_train.jsonl", "--dev", "data/ner_dev.jsonl"], "ner_dev.jsonl", False),
    "qa": (["--train", "data/qa_train.json", "--dev", "data/qa_dev.json"], "qa_dev.jsonl", True),
}


def dev_texts(name: str) -> list:
    path = ROOT / "data" / name
    if name.endswith(".tsv"):
        return [line.split("\t")[-1] for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    if name.startswith("qa"):
        return [[r["question"], r["context"][:150]] for r in records]
    return [r["text"] for r in records]


def trained_direction(task: str, work: Path, torch_python: str) -> tuple[int, int, float]:
    """(texts whose ids equal, texts, max difference) for a scratch:tiny model trained here, exported, loaded by
    transformers."""

    from ernie_ft import cli
    from ernie_ft.inference.export import export
    from ernie_ft.training.checkpoint import load_model

    flags, name, pairs = TRAINED[task]
    run = work / f"run-{task}"
    argv = [task, "--model", "scratch:tiny", *flags, "--output", str(run), "--epochs", "1", "--overwrite"]
    with contextlib.redirect_stdout(sys.stderr):  # the table alone on stdout
        if cli.main(argv + ["--max-len", "256"]) != 0:
            raise SystemExit(f"training failed: {' '.join(argv)}")
        target = work / f"export-{task}"
        export(str(run), str(target), overwrite=True, format="hf")
    texts = dev_texts(name)
    (work / f"{task}.json").write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    command = [torch_python, str(HERE / "hf_reference.py"), "--model", str(target)]
    command += ["--texts", str(work / f"{task}.json")] + (["--pairs"] if pairs else [])
    theirs = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    loaded = load_model(str(run))
    pipeline, same = loaded.pipeline, 0
    for row, mask, text in zip(theirs["input_ids"], theirs["attention_mask"], texts):
        ids = [pipeline.cls_id]
        for part in [text] if isinstance(text, str) else text:
            ids += [*pipeline.encode(part).ids, pipeline.sep_id]
        same += [i for i, m in zip(row, mask) if m] == ids
    token_types = [[0] * len(row) for row in theirs["input_ids"]]
    if pairs:  # the second segment's type is 1 (ids after the first [SEP])
        for types, row in zip(token_types, theirs["input_ids"]):
            first = row.index(pipeline.sep_id)
            types[first + 1 :] = [1] * (len(row) - first - 1)
    record = {**theirs, "token_type_ids": token_types}
    return same, len(texts), max_difference(outputs(loaded.model, record), record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch-python", required=True, help="a Python with torch and transformers")
    parser.add_argument("--work", help="where the exports go (default: a temporary directory)")
    args = parser.parse_args()

    expected = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
    work = Path(args.work or tempfile.mkdtemp(prefix="hf-parity-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"transformers {expected['transformers']}, torch {expected['torch']}\n")
    print("| checkpoint | architecture | direction | ids equal | max abs difference |")
    print("|---|---|---|---|---|")
    for kind, (_, head) in CLASSES.items():
        record = expected["kinds"][kind]
        print(
            f"| {kind} | {record['class']} | in | {'yes' if our_ids(kind, record) else 'NO'} | "
            f"{max_difference(ours(kind, record), record):.1e} |"
        )
        if head in ("sequence", "token", "span"):  # what --format hf writes
            same, diff = out_direction(kind, work, args.torch_python)
            print(f"| {kind} | {record['class']} | out | {'yes' if same else 'NO'} | {diff:.1e} |")
    for task in TRAINED:
        same, total, diff = trained_direction(task, work, args.torch_python)
        print(f"| scratch:tiny trained by `ernie_ft.{task}` | | out | {same} of {total} | {diff:.1e} |")


if __name__ == "__main__":
    main()
