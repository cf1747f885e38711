"""The ERNIE backbone with a task head: from a PaddleNLP name, a checkpoint directory or a scratch preset
(``model_source`` tells which and checks it), and its outputs over a list of features.

Heads are PaddleNLP's own (sequence, token and span classification), so a checkpoint we
write loads in plain PaddleNLP with ``ErnieFor*.from_pretrained(dir)``. Models return logits.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys

import numpy as np

from ernie_ft.config import DataConfig, ModelConfig
from ernie_ft.data.batching import LengthGroupedSampler, collate
from ernie_ft.errors import UserError
from ernie_ft.models import hf, weights
from ernie_ft.models.model_dir import ModelDir
from ernie_ft.models.model_source import (
    FILE_ERRORS,
    check_directory,
    is_scratch,
    model_dir_of,
    offline_hint,
    scratch_config,
)
from ernie_ft.models.weights import describe_loading, from_pretrained
from ernie_ft.text.extension import same_pieces
from ernie_ft.text.pipeline import TextPipeline
from ernie_ft.text.scratch import build_vocab, write_vocab

HEADS = {
    "sequence": "ErnieForSequenceClassification",
    "token": "ErnieForTokenClassification",
    "span": "ErnieForQuestionAnswering",
    "mlm": "ErnieForMaskedLM",
}
MODEL_EXTRAS = ("masked_positions", "original_ids", "replace_uniform", "pair_index")
"""Batch keys passed to the model besides the ids (pretraining: see masking.mlm_batch; the relation extractor's
training cells: relation.task.training_targets)."""
PER_TOKEN = ("token", "span")
"""Heads with one output row per token; 'sequence' has one per input, 'mlm' one per masked position."""
SHAPE_MISMATCH = "Error(s) in loading state_dict"
"""How Paddle's RuntimeError for weights whose shapes differ from the config's begins."""


def load_pipeline(
    model: ModelConfig, data: DataConfig, train_texts, exact_spans: bool = False, model_dir: ModelDir | None = None
) -> TextPipeline:
    """The text pipeline for a model: its checkpoint's vocabulary, --vocab, or one built from train,
    with --vocab-extension (or the extension saved with the checkpoint). ``model_dir``: --model already read
    (``model_dir_of``), else it is read here.

    A vocabulary built from the training texts is written to the cache directory under its
    content hash (the checkpoint gets its own copy when it is saved). ``exact_spans`` (see
    ``task.exact_spans``) makes the extension encode characters, not pieces.
    """
    extension = model.vocab_extension
    if extension is not None and not os.path.isdir(extension):
        raise UserError(
            f"--vocab-extension {extension}: directory not found; create it with python -m ernie_ft.vocab learn"
        )
    options = dict(vocab_extension=extension, exact_spans=exact_spans)
    if data.user_dict:  # else a checkpoint keeps its own
        options["user_dict"] = data.user_dict
    if is_scratch(model.model):
        scratch_config(model.model)
        vocab = model.vocab
        if vocab is None:
            tokens = build_vocab(train_texts())
            digest = hashlib.sha1("\n".join(tokens).encode("utf-8")).hexdigest()[:16]
            os.makedirs(data.cache_dir, exist_ok=True)
            vocab = os.path.join(data.cache_dir, f"vocab-{digest}.txt")
            write_vocab(tokens, vocab)
        elif os.path.isdir(vocab):  # a tokenizer directory: its vocabulary with its settings (distill --student-vocab)
            saved = {k: v for k, v in options.items() if v is not None or k != "vocab_extension"}
            return TextPipeline.from_dir(vocab).replace(**saved)
        elif not os.path.isfile(vocab):
            raise UserError(f"--vocab: {vocab} not found")
        return TextPipeline(vocab, **options)
    if model.vocab:
        raise UserError("--vocab only applies to scratch models; a checkpoint brings its own vocabulary")
    found = model_dir_of(model) if model_dir is None else model_dir
    if found is not None:
        check_directory(found)
        saved = found.tokenizer.get("vocab_extension")
        if saved is not None:  # the checkpoint's weights were trained with it
            if extension is not None and not same_pieces(extension, saved):
                raise UserError(
                    f"--vocab-extension {extension}: --model {model.model} already has a different "
                    "vocabulary extension; drop the flag to keep the checkpoint's"
                )
            options["vocab_extension"] = saved
        return found.pipeline(**options)  # built once, with the saved settings and these
    from paddlenlp.transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model.model)
    except FILE_ERRORS as e:  # PaddleNLP raises OSError (requests' errors among them) or ValueError when offline
        raise offline_hint(model.model, str(e)) from None
    vocab_file = getattr(tokenizer, "vocab_file", None) or tokenizer.init_kwargs.get("vocab_file")
    if not vocab_file or not os.path.isfile(vocab_file):
        raise UserError(
            f"--model {model.model}: its tokenizer has no WordPiece vocab.txt; ernie_ft supports "
            "ERNIE-family (BERT-style vocabulary) models"
        )
    # The ids PaddleNLP's ErnieTokenizer gives, which the model was pretrained on
    return TextPipeline(vocab_file, lowercase=getattr(tokenizer, "do_lower_case", True), rules="paddlenlp", **options)


def model_class(head: str, custom: str | None = None):
    """The PaddleNLP class for a head, or a task's own ``module:Class`` (e.g. a tagger with a CRF)."""
    import importlib

    import paddlenlp.transformers as pt

    if custom:
        module, _, name = custom.partition(":")
        return getattr(importlib.import_module(module), name)
    if head == "sequence":  # PaddleNLP's, computing the last layer for [CLS] only (``first_token``)
        from ernie_ft.models.first_token import ErnieForSequenceClassification

        return ErnieForSequenceClassification
    return getattr(pt, HEADS[head])


def build_model(
    model: ModelConfig,
    head: str,
    num_labels: int,
    pipeline: TextPipeline,
    custom_class: str | None = None,
    model_dir: ModelDir | None = None,
):
    """An ERNIE model with the head ``head`` and ``num_labels`` outputs (2 for spans); ``model_dir``: as for
    ``load_pipeline``."""
    import paddlenlp.transformers as pt

    cls = model_class(head, custom_class)
    overrides = (
        {}
        if model.dropout is None
        else {"hidden_dropout_prob": model.dropout, "attention_probs_dropout_prob": model.dropout}
    )
    if head in ("sequence", "token", "pointer"):  # pointer: a relation class per label (relation.model)
        overrides["num_labels"] = num_labels
    if is_scratch(model.model):
        config = pt.ErnieConfig(
            vocab_size=pipeline.vocab_size,
            pad_token_id=pipeline.pad_id,
            type_vocab_size=4,
            use_task_id=False,
            **scratch_config(model.model),
            **overrides,
        )
        return cls(config)
    found = model_dir_of(model) if model_dir is None else model_dir
    if found is not None:
        check_directory(found)
    net, loading = _pretrained(cls, model, found, head, overrides)
    if model.new_head:
        net, loading = weights.new_head(net, cls, overrides.get("num_labels"))
    if loading:
        print(f"--model {model.model}: {loading}", file=sys.stderr)
    if pipeline.extension is not None and not (found is not None and found.tokenizer.get("vocab_extension")):
        grow_embeddings(net, pipeline)
    if net.config.vocab_size < pipeline.vocab_size:
        raise UserError(
            f"--model {model.model}: vocab.txt has {pipeline.vocab_size} tokens but the model's "
            f"embedding only {net.config.vocab_size}; the tokenizer and weights do not match"
        )
    return net


def _pretrained(cls, model: ModelConfig, found: ModelDir | None, head: str, overrides: dict):
    """(``cls`` with the weights of --model, a line on what was not loaded or None) for a directory (ernie_ft,
    PaddleNLP or transformers: ``found``, as read) or a PaddleNLP name (``found`` None)."""
    if found is not None and found.hf_config is not None:
        return hf.load(cls, model.model, head, source=found, **overrides)
    if model.new_head:  # loaded as it was saved, its own head's shape: new_head replaces the head
        overrides = {k: v for k, v in overrides.items() if k != "num_labels"}
    try:
        if found is not None:
            net = from_pretrained(cls, model.model, model.trust_pickle, files=found.files, **overrides)
            return net, describe_loading(net, model.model, files=found.files)
        return cls.from_pretrained(model.model, **overrides), None
    except UserError:
        raise
    except (*FILE_ERRORS, RuntimeError) as e:
        if isinstance(e, RuntimeError) and not str(e).startswith(SHAPE_MISMATCH):
            raise  # a bug of ours or of a library: its traceback
        if found is not None:
            labels, n = found.labels, overrides.get("num_labels")
            shapes = isinstance(e, RuntimeError)  # the weights were read: their names tell the head's from others
            stored = weights.stored_names(model.model, files=found.files) if shapes else None
            raise weights.head_mismatch(model.model, str(e), cls.base_model_prefix, labels, n, stored) or UserError(
                f"--model {model.model}: cannot load the checkpoint ({str(e).splitlines()[0][:200]})"
            ) from None
        raise offline_hint(model.model, str(e)) from None


def grow_embeddings(net, pipeline: TextPipeline) -> None:
    """Give each vocabulary-extension piece a word-embedding row: the mean of the base rows of its
    characters. The matrix grows when the pieces' ids run past it (config.vocab_size follows)."""
    base = net.get_input_embeddings().weight.numpy()
    if pipeline.vocab_size > base.shape[0]:
        net.resize_token_embeddings(pipeline.vocab_size)  # a tied MLM projection and its bias grow too
        for layer in net.sublayers():  # PaddleNLP's LM heads keep a second name for the old bias
            if hasattr(layer, "decoder_bias") and hasattr(layer, "decoder"):
                layer.decoder_bias = layer.decoder.bias
    embedding = net.get_input_embeddings()
    weight = embedding.weight.numpy().copy()
    for piece_id, char_ids in pipeline.extension.char_ids(pipeline.vocab, pipeline.unk_id).items():
        weight[piece_id] = base[char_ids].mean(axis=0)
    embedding.weight.set_value(weight.astype(base.dtype))


def position_limit(net) -> int:
    return int(net.config.max_position_embeddings)


def check_max_len(data: DataConfig, net, spec: str) -> None:
    limit = position_limit(net)
    if data.max_len > limit:
        raise UserError(
            f"--max-len {data.max_len} exceeds the position limit of --model {spec} "
            f"({limit} = max_position_embeddings); use --max-len {limit} or less, long texts "
            f"are split into windows anyway"
        )


def to_tensors(batch: dict) -> dict:
    import paddle

    return {k: paddle.to_tensor(v) for k, v in batch.items()}


def forward(model, batch: dict):
    """Logits for a batch; span heads' (start, end) pair is stacked on the last axis."""
    extra = {k: batch[k] for k in MODEL_EXTRAS if k in batch}
    out = model(
        input_ids=batch["input_ids"],
        token_type_ids=batch["token_type_ids"],
        position_ids=batch.get("position_ids"),
        **extra,
    )
    if not isinstance(out, (tuple, list)):
        return out
    if isinstance(out[0], np.ndarray):  # an engine of numpy arrays (``takes_arrays``)
        return np.stack(out, axis=-1)
    import paddle

    return paddle.stack(out, axis=-1)


def task_batching(task, pipeline, seed: int = 0) -> dict:
    """``compute_logits`` keywords that let the task make its own batches and summarise its outputs
    (pretraining: evaluation's fixed masks, per-position rows; see ``TaskHooks.collate`` and ``summarize``)."""
    return {"collate_fn": lambda features: task.collate(features, pipeline, seed, None), "summarize": task.summarize}


def compute_logits(
    model,
    features,
    pad_id: int,
    batch_size: int,
    precision=None,
    head: str = "sequence",
    parallel=None,
    collate_fn=None,
    summarize=None,
):
    """Model outputs for every feature, in feature order (numpy).

    A 'sequence' head gives one array [features, labels]; 'token' and 'span' heads give a list
    with one [tokens, outputs] array per feature, cut to the feature's own length; with
    ``summarize(outputs, batch)`` (a task's, see ``task_batching``) returning rows, the list holds its row
    per input. ``collate_fn(features)`` replaces the usual batching unless it returns None. ``parallel``
    lays the batches out for a tensor-parallel model (whose every rank runs every batch). A model whose
    ``takes_arrays`` is true (ONNX Runtime's) takes and gives numpy arrays: nothing here imports Paddle for it.
    """
    arrays = getattr(model, "takes_arrays", False)
    if not arrays:
        import paddle
    per_token = head in PER_TOKEN
    was_training = model.training
    model.eval()
    lengths = getattr(features, "lengths", None)  # features read lazily from disk know theirs
    lengths = [len(f["input_ids"]) for f in features] if lengths is None else lengths
    sampler = LengthGroupedSampler(lengths, batch_size, shuffle=False)
    outputs = [None] * len(features)
    summarized = False
    with contextlib.nullcontext() if arrays else paddle.no_grad():
        for indices in sampler.batches():
            chosen = [features[i] for i in indices]
            batch = collate_fn(chosen) if collate_fn else None
            batch = collate(chosen, pad_id, head == "token") if batch is None else batch
            batch = batch if arrays else to_tensors(batch)
            if parallel is not None:
                batch = parallel.distribute(batch, split=False)
            with precision.autocast() if precision else contextlib.nullcontext():
                logits = forward(model, batch)
            logits = parallel.dense(logits) if parallel is not None else logits
            rows = summarize(logits, batch) if summarize else None
            summarized |= rows is not None
            if rows is None:
                rows = logits.astype("float32")
                rows = rows if arrays else rows.numpy()
            for row, i in enumerate(indices):
                outputs[i] = rows[row][: len(chosen[row]["input_ids"])] if per_token else rows[row]
    model.train(was_training)
    return outputs if per_token or summarized or not outputs else np.stack(outputs)
