"""What ``hf_parity.py`` compares: the checkpoint kinds of tests/fixtures/hf with the PaddleNLP class and ernie_ft
head each loads as, a model's outputs named as transformers names them, and the largest difference between two
sets of outputs over the real tokens. (tests/test_hf.py loads this file and makes the same comparison.)"""

from __future__ import annotations

import numpy as np

CLASSES = {  # fixture kind: (PaddleNLP class, ernie_ft head)
    "bert-base": ("ErnieModel", None),
    "bert-seq": ("ErnieForSequenceClassification", "sequence"),
    "bert-seq-legacy": ("ErnieForSequenceClassification", "sequence"),
    "bert-token": ("ErnieForTokenClassification", "token"),
    "bert-qa": ("ErnieForQuestionAnswering", "span"),
    "ernie-seq": ("ErnieForSequenceClassification", "sequence"),
    "bert-mlm": ("ErnieForMaskedLM", "mlm"),
}


def outputs(net, record: dict) -> dict:
    """``net``'s outputs on ``record``'s ids, named as transformers names them."""
    import paddle

    net.eval()
    out = net(
        input_ids=paddle.to_tensor(record["input_ids"]), token_type_ids=paddle.to_tensor(record["token_type_ids"])
    )
    if isinstance(out, (tuple, list)):
        names = ("last_hidden_state", "pooler_output") if "pooler_output" in record else ("start_logits", "end_logits")
        return dict(zip(names, (o.numpy() for o in out)))
    return {"logits": out.numpy()}


def max_difference(ours: dict, record: dict) -> float:
    """The largest absolute difference between ``ours`` and ``record``'s outputs of the same names (per-token
    outputs on the real tokens only, by ``record['attention_mask']``)."""
    mask = np.array(record["attention_mask"], bool)
    worst = 0.0
    for name, value in ours.items():
        reference = np.array(record[name], dtype="float32")
        if value.ndim >= 2 and value.shape[:2] == mask.shape:  # per token: compare real tokens only
            value, reference = value[mask], reference[mask]
        worst = max(worst, float(np.abs(value - reference).max()))
    return worst
