"""Tiny Hugging Face transformers checkpoints and the outputs transformers gives on them: the reference that
tests/test_hf.py checks ernie_ft's loading and export against (CI has no torch).

Remake the fixture (needs torch and transformers, never the project's own venv):

    /work/venv-torch/bin/python scripts/make_hf_fixture.py --out tests/fixtures/hf

Writes one directory per checkpoint kind (config.json, model.safetensors, vocab.txt, tokenizer files, as
``save_pretrained`` writes them) and ``expected.json``: per kind, the texts, the ids BertTokenizer gives and the
outputs of the model in eval mode. ``bert-seq-legacy`` is ``bert-seq`` with the tensor names of old BERT
checkpoints (``LayerNorm.gamma``/``beta``, a ``position_ids`` buffer): the same outputs.

The other direction, tests/fixtures/hf_export (what transformers answers when it loads ``export --format hf``):
``source`` is the best/ checkpoint of a run of the project's venv (``python -m ernie_ft classify --model
tests/fixtures/hf/ernie-seq --train data/sentiment_train.tsv --dev data/sentiment_dev.tsv --max-len 64 --epochs 1
--seed 1 --threads 1``, its recorded output path made relative); then

    .venv/bin/python -m ernie_ft export --model tests/fixtures/hf_export/source --format hf \
        --output tests/fixtures/hf_export/exported --overwrite
    /work/venv-torch/bin/python scripts/hf_reference.py --model tests/fixtures/hf_export/exported \
        --texts tests/fixtures/hf_export/texts.json > tests/fixtures/hf_export/transformers.json

The export is deterministic (the same bytes each time), so the recorded answers stay those of what export writes
until export changes; tests/test_hf.py then asks for this to be run again.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import transformers as tf
from safetensors.torch import load_file, save_file

TEXTS = ["这家酒店的服务很好", "房间太小了，不推荐。", "北京的天气不错", "我在上海工作"]
QA = [("谁在上海工作", "我在上海工作"), ("天气怎么样", "北京的天气不错")]
SHAPE = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64
)
KINDS = {
    "bert-base": ("BertModel", dict()),
    "bert-seq": ("BertForSequenceClassification", dict(id2label={0: "负面", 1: "正面"})),
    "bert-token": (
        "BertForTokenClassification",
        dict(id2label={0: "O", 1: "B-LOC", 2: "I-LOC", 3: "B-PER", 4: "I-PER"}),
    ),
    "bert-qa": ("BertForQuestionAnswering", dict()),
    "ernie-seq": (
        "ErnieForSequenceClassification",
        dict(
            id2label={0: "差", 1: "中", 2: "好"},
            use_task_id=True,
            task_type_vocab_size=3,
            type_vocab_size=4,
            layer_norm_eps=1e-5,
        ),
    ),
    "bert-mlm": ("BertForMaskedLM", dict()),  # last: the kinds before keep their seeds
}


def write_vocab(path: str) -> None:
    chars = sorted({c for text in TEXTS + [q + c for q, c in QA] for c in text})
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, "##店", "##好", "a", "##b"]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")


def randomize(model, seed: int) -> None:
    """Every weight drawn at a scale where a wrong name, transpose or epsilon shows in the outputs."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            # embeddings at pretraining's initial scale, where the first LayerNorm's epsilon (1e-5 or 1e-12) shows
            noise = torch.randn(param.shape, generator=generator) * (0.02 if "_embeddings" in name else 0.3)
            param.copy_(noise + 1.0 if "LayerNorm.weight" in name else noise)


def outputs(model, kind: str, tokenizer) -> dict:
    if kind == "bert-qa":
        batch = tokenizer([q for q, _ in QA], [c for _, c in QA], padding=True, return_tensors="pt")
    else:
        batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch)
    record = {key: batch[key].tolist() for key in ("input_ids", "token_type_ids", "attention_mask")}
    if kind == "bert-base":
        record.update(last_hidden_state=out.last_hidden_state.tolist(), pooler_output=out.pooler_output.tolist())
    elif kind == "bert-qa":
        record.update(start_logits=out.start_logits.tolist(), end_logits=out.end_logits.tolist())
    else:
        record["logits"] = out.logits.tolist()
    return record


def legacy_names(directory: str, target: str) -> None:
    """``directory``'s checkpoint saved under old BERT tensor names, into ``target``."""
    os.makedirs(target, exist_ok=True)
    state = load_file(os.path.join(directory, "model.safetensors"))
    renamed = {
        name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): value
        for name, value in state.items()
    }
    renamed["bert.embeddings.position_ids"] = torch.arange(SHAPE["max_position_embeddings"])[None]
    save_file(renamed, os.path.join(target, "model.safetensors"), metadata={"format": "pt"})
    for name in os.listdir(directory):
        if name != "model.safetensors":
            with open(os.path.join(directory, name), "rb") as src, open(os.path.join(target, name), "wb") as dst:
                dst.write(src.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="tests/fixtures/hf")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    vocab = os.path.join(args.out, "vocab.txt")
    write_vocab(vocab)
    tokenizer = tf.BertTokenizer(vocab, do_lower_case=True)
    expected = {
        "command": "/work/venv-torch/bin/python scripts/make_hf_fixture.py --out tests/fixtures/hf",
        "transformers": tf.__version__,
        "torch": torch.__version__,
        "kinds": {},
    }
    for seed, (kind, (cls_name, extra)) in enumerate(KINDS.items()):
        config_cls = tf.ErnieConfig if kind.startswith("ernie") else tf.BertConfig
        config = config_cls(vocab_size=tokenizer.vocab_size, **SHAPE, **extra)
        model = getattr(tf, cls_name)(config).eval()
        randomize(model, seed)
        directory = os.path.join(args.out, kind)
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        expected["kinds"][kind] = {"class": cls_name, **outputs(model, kind, tokenizer)}
    legacy_names(os.path.join(args.out, "bert-seq"), os.path.join(args.out, "bert-seq-legacy"))
    expected["kinds"]["bert-seq-legacy"] = dict(expected["kinds"]["bert-seq"])
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)
        f.write("\n")
    os.remove(vocab)


if __name__ == "__main__":
    main()
