"""Masked-language-model pretraining on unlabelled text: ``python -m ernie_ft.pretrain``.

Continue ERNIE's pretraining on a domain corpus (``--model`` a checkpoint or PaddleNLP name), or
pretrain a small model from scratch (``--model scratch:tiny --vocab vocab.txt``), on the same
trainer as the tasks. The corpus is read (``corpus.py``) and packed into blocks (``blocks.py``), masked per block and
epoch (``masking.py``), and the model is PaddleNLP's ``ErnieForMaskedLM``, its output projection
tied to the word embeddings and applied only at the masked positions. The checkpoint loads in
``classify``, ``ner`` and ``qa`` (``--model RUN/best``) and in PaddleNLP. ``predict`` fills in
``[MASK]``s.
"""

from __future__ import annotations

import functools
import math
import re
import sys
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from ernie_ft.config import DataConfig
from ernie_ft.errors import UserError
from ernie_ft.task import TaskHooks

MASK_TEXT = "[MASK]"
DEFAULT_DEV_FRACTION = 0.01


def check_masked(example, where: str) -> None:
    """Refuse a fill-mask text without a [MASK] (``where``: its place, for the message)."""
    if MASK_TEXT not in example.text:
        raise UserError(
            f"{where}: no {MASK_TEXT} in this text; write {MASK_TEXT} where a token should be predicted, "
            "e.g. 今天天气很[MASK]。"
        )


@dataclass
class Pretraining(TaskHooks):
    """Masked language modelling with whole-word (jieba) or per-token masks."""

    name: str = "pretrain"
    head: str = "mlm"
    metric: str = "mlm_loss"
    objective: str = "mlm"
    """mlm: masked language model; electra: replaced-token detection with a small generator (ELECTRA), whose
    discriminator is the saved encoder."""
    masking: str = "word"
    """word: mask whole jieba words (--user-dict entries included) as units; char: each token on its own."""
    mask_rate: float = 0.15
    """Share of each block's tokens chosen for prediction (80% [MASK], 10% a random token, 10% unchanged)."""
    dev_fraction: Optional[float] = None
    """Share of the --corpus documents held out as dev when no --dev is given, picked by a hash of each document.
    Default: 0.01 (none when that picks no document); 0 turns it off."""
    top_k: int = 5
    """Predictions per [MASK] (predict)."""
    reads_corpus: ClassVar[bool] = True
    """The data flag is --corpus FILE..., streamed from disk (see ``corpus.py``)."""
    unused_data_settings: ClassVar[dict] = {
        **dict.fromkeys(
            ("label_column", "allow_new_labels", "label_names", "predictions_as_labels"),
            "a pretraining corpus is unlabelled",
        ),
        **dict.fromkeys(
            ("stride", "window_pooling"), "a corpus is packed into --max-len blocks, not cut into overlapping windows"
        ),
        "dev_split": "pretraining holds out documents with --dev-fraction",
        **dict.fromkeys(("header", "sheet"), "a corpus table's header is found from its content"),
    }
    """Data settings pretraining never reads: no flag, and a recipe that sets one is an error."""
    flat_fields: ClassVar[tuple] = ("masked_positions", "masked_labels", "masked_weights", "replace_uniform")
    """Batch entries indexed by masked position (into the flattened batch), not by row: a mesh keeps them whole."""
    input_fields: ClassVar[tuple] = (("text",), ())
    reads_records_apart: ClassVar[bool] = True
    """Fill-mask: a text with [MASK]s."""
    example_input: ClassVar[dict] = {"text": "今天天气很[MASK]。"}
    """What ``serve`` warms the model up with."""

    def __post_init__(self):
        if self.objective not in ("mlm", "electra"):
            raise UserError(f"--objective must be mlm or electra, not {self.objective!r}")
        if self.objective == "electra" and self.metric == "mlm_loss":
            self.metric = "electra_loss"  # the generator's MLM loss says little about the discriminator
        if self.masking not in ("word", "char"):
            raise UserError(f"--masking must be word or char, not {self.masking!r}")
        if not 0 < self.mask_rate < 1:
            raise UserError(f"--mask-rate {self.mask_rate}: give a share between 0 and 1, e.g. 0.15")
        if self.dev_fraction is not None and not 0 <= self.dev_fraction < 1:
            raise UserError(f"--dev-fraction {self.dev_fraction}: give a share between 0 and 1, e.g. 0.01")
        if self.top_k < 1:
            raise UserError("--top-k must be at least 1")

    @property
    def model_class(self) -> Optional[str]:
        return "ernie_ft.models.electra:ErnieElectra" if self.objective == "electra" else None

    # -- data -------------------------------------------------------------------------------------------------

    def read(self, path: str, data: DataConfig, flag: str, labelled: bool = True):
        """A corpus (training, --dev) checked and counted, or fill-mask texts (prediction)."""
        from ernie_ft.data.readers import read_examples
        from ernie_ft.pretrain.corpus import scan

        if labelled:
            return scan(path, "--corpus" if flag == "--train" else flag, data.text_column, data.text_pair_column)
        return read_examples(
            path, text_column=data.text_column, label_column=None, require_label=False, flag=flag, check=check_masked
        )

    def read_records(self, records, data: DataConfig, flag: str):
        """The fill-mask texts ``read`` gives for a JSON Lines file of ``records``."""
        from ernie_ft.data.readers import record_examples

        return record_examples(
            records, text_column=data.text_column, label_column=None, require_label=False, flag=flag, check=check_masked
        )

    def held_out(self, train, data: DataConfig):
        """(train, dev) when no --dev is given: documents held out by hash (see ``Corpus.held_out``)."""
        fraction = DEFAULT_DEV_FRACTION if self.dev_fraction is None else self.dev_fraction
        if fraction == 0:
            return train, None
        rest, dev = train.held_out(fraction)
        if dev.documents == 0 or rest.documents == 0:
            if self.dev_fraction is None:
                print(
                    f"note: --corpus has {train.documents} documents, too few to hold out {fraction:.0%} as dev; "
                    "training without dev (give --dev FILE to evaluate)",
                    file=sys.stderr,
                )
                return train, None
            side = "no document" if dev.documents == 0 else "every document"
            raise UserError(
                f"--dev-fraction {fraction} holds out {side} of the {train.documents} in --corpus; "
                "choose another share or give --dev FILE"
            )
        return rest, dev

    def fit_labels(self, train):
        return []

    def check_labels(self, examples, labels, data, flag):
        pass

    def texts(self, examples):
        """Every line of a corpus (a stream: for building a scratch vocabulary), or the fill-mask texts."""
        if isinstance(examples, list):
            return [e.text for e in examples]
        return (line for _, lines in examples.iter_documents() for line in lines)

    def stream_features(self, examples, pipeline, data: DataConfig):
        """Packed blocks of a corpus, memory-mapped from the cache (None for fill-mask texts: featurize)."""
        from ernie_ft.data.dataset import default_cache_dir
        from ernie_ft.pretrain.blocks import cached_blocks

        if isinstance(examples, list):
            return None
        return cached_blocks(examples, pipeline, data.max_len, data.cache_dir or default_cache_dir(), data.num_proc)

    def featurize(self, examples, encodings, pipeline, labels, data):
        """Fill-mask inputs: each [MASK] in the text becomes one mask token, whose position goes in '_masked'."""
        self.vocabulary = id_to_token(pipeline)
        features = []
        for doc, (example, enc) in enumerate(zip(examples, encodings)):
            spans = [(m.start(), m.end()) for m in re.finditer(re.escape(MASK_TEXT), example.text)]
            ids, masked, span = [pipeline.cls_id], [], -1
            for token, (start, _) in zip(enc.ids, enc.offsets):
                inside = next((k for k, (a, b) in enumerate(spans) if a <= start < b), None)
                if inside is None:
                    ids.append(token)
                elif inside != span:
                    span = inside
                    masked.append(len(ids))
                    ids.append(pipeline.mask_id)
            ids.append(pipeline.sep_id)
            if len(ids) > data.max_len:
                raise UserError(
                    f"{example.source}:{example.line}: {len(ids)} tokens, over --max-len {data.max_len}; "
                    "shorten the text around its [MASK]s"
                )
            features.append({"input_ids": ids, "token_type_ids": [0] * len(ids), "_masked": masked, "doc": doc})
        return features

    def collate(self, features, pipeline, seed: int, epoch: Optional[int]) -> dict:
        """A masked batch (``masking.mlm_batch``): epoch None gives evaluation's fixed masks."""
        from ernie_ft.pretrain.masking import mlm_batch

        return mlm_batch(
            features,
            pipeline.pad_id,
            pipeline.sep_id,
            pipeline.mask_id,
            random_ids(pipeline),
            self.mask_rate,
            self.masking == "word",
            seed,
            epoch,
            electra=self.objective == "electra",
        )

    # -- model outputs ----------------------------------------------------------------------------------------

    def loss(self, outputs, batch):
        """Cross-entropy at the masked positions, each block weighing the same (so data-parallel replicas
        average to exactly the loss of one process over the global batch); for ELECTRA plus 50 x the
        discriminator's per-token binary cross-entropy, weighted the same way."""
        import paddle.nn.functional as F

        if not isinstance(outputs, dict):
            nll = F.cross_entropy(outputs.astype("float32"), batch["masked_labels"].unsqueeze(-1), reduction="none")
            return (nll.squeeze(-1) * batch["masked_weights"]).sum()
        from ernie_ft.models.electra import DISCRIMINATOR_WEIGHT

        replaced = (outputs["replaced"] != batch["original_ids"]).astype("float32")
        bce = F.binary_cross_entropy_with_logits(outputs["discriminator"].astype("float32"), replaced, reduction="none")
        return self.loss(outputs["generator"], batch) + DISCRIMINATOR_WEIGHT * (bce * batch["token_weights"]).sum()

    def summarize(self, logits, batch) -> list:
        """Per input, one row per masked position: negative log-likelihood, correct (top-1), has a label,
        then the ``top_k`` token ids and their probabilities. ELECTRA's outputs give (those rows, per token [the
        discriminator's binary cross-entropy, its logit, 1 if replaced]) per input."""
        import paddle
        import paddle.nn.functional as F

        if isinstance(logits, dict):
            replaced = (logits["replaced"] != batch["original_ids"]).astype("float32")
            scores = logits["discriminator"].astype("float32")
            bce = F.binary_cross_entropy_with_logits(scores, replaced, reduction="none")
            real = (batch["token_weights"] > 0).numpy()
            detection = np.stack([bce.numpy(), scores.numpy(), replaced.numpy()], axis=-1)
            return list(zip(self.summarize(logits["generator"], batch), (d[r] for d, r in zip(detection, real))))

        # No log_softmax (Paddle 3.3's CPU kernel takes ~50 s on [800, 40000]) and no second [positions x
        # vocabulary] tensor: cross_entropy gives log-sum-exp - logit[target], hence the top tokens' probabilities.
        logits, labels = logits.astype("float32"), batch["masked_labels"]
        target = labels.clip(min=0).unsqueeze(-1)
        nll = F.cross_entropy(logits, target, reduction="none").squeeze(-1)
        log_norm = nll + paddle.take_along_axis(logits, target, axis=-1).squeeze(-1)
        top_logits, top_ids = paddle.topk(logits, k=min(self.top_k, logits.shape[-1]), axis=-1)
        top_p = paddle.exp(top_logits - log_norm.unsqueeze(-1))
        known = (labels >= 0).numpy()
        table = np.column_stack(
            [
                np.where(known, nll.numpy(), 0.0),
                (top_ids[:, 0] == labels).numpy(),
                known,
                top_ids.numpy(),
                top_p.numpy(),
            ]
        )
        rows, length = batch["input_ids"].shape
        owner = batch["masked_positions"].numpy() // length
        return [table[owner == r] for r in range(rows)]

    def evaluate(self, outputs, features, examples, labels, data):
        detection = None
        if outputs and isinstance(outputs[0], tuple):  # ELECTRA
            outputs, detection = [o for o, _ in outputs], np.concatenate([d for _, d in outputs])
        table = np.concatenate([o for o in outputs if len(o)]) if len(outputs) else np.zeros((0, 3))
        known = table[:, 2] > 0
        loss = float(table[known, 0].mean()) if known.any() else float("nan")
        metrics = {
            "mlm_loss": loss,
            "perplexity": float(math.exp(min(loss, 50.0))),
            "masked_accuracy": float(table[known, 1].mean()) if known.any() else 0.0,
            "masked_tokens": float(known.sum()),
        }
        if detection is not None:
            from ernie_ft.models.electra import DISCRIMINATOR_WEIGHT

            bce, scores, replaced = detection.T
            metrics.update(
                replaced_loss=float(bce.mean()),
                replaced_accuracy=float(((scores > 0) == replaced).mean()),
                electra_loss=loss + DISCRIMINATOR_WEIGHT * float(bce.mean()),
                **replaced_ranking(scores, replaced),
            )
        return metrics

    def predict(self, outputs, features, examples, labels, data):
        """Per text: the top-k tokens of each [MASK] and the text filled with the first of each."""
        records = []
        k = (outputs[0].shape[1] - 3) // 2 if len(outputs) else self.top_k
        for example, rows in zip(examples, outputs):
            masks = [
                [
                    {"token": self.vocabulary.get(int(i), "[UNK]"), "score": round(float(p), 6)}
                    for i, p in zip(row[3 : 3 + k], row[3 + k : 3 + 2 * k])
                ]
                for row in rows
            ]
            filled = example.text
            for top in masks:
                filled = filled.replace(MASK_TEXT, top[0]["token"].removeprefix("##"), 1)
            records.append({"text": example.text, "masks": masks, "filled": filled})
        return records


def replaced_ranking(scores: np.ndarray, replaced: np.ndarray) -> dict:
    """What the discriminator knows beyond the share of replaced tokens: 'replaced_share' (calling every
    token original is right on all the others) and 'replaced_auc', the chance that a replaced token scores
    above an original one (0.5: it tells them apart no better than chance; absent when dev has only one kind)."""
    from sklearn.metrics import roc_auc_score

    share = {"replaced_share": float(replaced.mean())}
    return {**share, "replaced_auc": float(roc_auc_score(replaced, scores))} if 0 < replaced.mean() < 1 else share


@functools.lru_cache(maxsize=4)
def _non_special(vocab_size: int, specials: tuple) -> np.ndarray:
    return np.setdiff1d(np.arange(vocab_size), np.array(specials))


def random_ids(pipeline) -> np.ndarray:
    """The ids a masked token may be swapped for: every id but the special tokens'."""
    return _non_special(
        pipeline.vocab_size, (pipeline.pad_id, pipeline.cls_id, pipeline.sep_id, pipeline.mask_id, pipeline.unk_id)
    )


@functools.lru_cache(maxsize=4)  # once per pipeline, not per request of a server
def id_to_token(pipeline) -> dict[int, str]:
    tokens = {i: t for t, i in pipeline.vocab.items()}
    if pipeline.extension is not None:
        tokens.update((i, p) for p, i in pipeline.extension.ids.items())
    return tokens
