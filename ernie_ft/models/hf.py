"""Hugging Face transformers checkpoints of the BERT family in and out: ``config.json`` with ``model_type`` ``bert``
or ``ernie`` and weights in ``model.safetensors``.

One table (``NAMES``) maps transformers' tensor names to PaddleNLP's ERNIE names, read one way to load and the
other to export, so a round trip gives back every tensor exactly. A ``pytorch_model.bin`` is a pickle, and is
refused with the command that converts it; torch is never needed.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from ernie_ft.errors import UserError
from ernie_ft.models.weights import (
    SAFE_INDEX,
    SAFE_WEIGHTS,
    apply_layer_norm_eps,
    has_file,
    layer_norm_eps,
    loading_line,
    stored_names,
)

MODEL_TYPES = ("bert", "ernie")
PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")
PADDLE_PREFIX = "ernie."

# (transformers name under the base model, PaddleNLP name under ``ernie.``, a Linear weight: stored transposed).
# ``{i}`` is the layer. A row whose tensor a checkpoint lacks (task types, a pooler) is skipped both ways.
NAMES = (
    ("embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight", False),
    ("embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight", False),
    ("embeddings.token_type_embeddings.weight", "embeddings.token_type_embeddings.weight", False),
    ("embeddings.task_type_embeddings.weight", "embeddings.task_type_embeddings.weight", False),
    ("embeddings.LayerNorm.weight", "embeddings.layer_norm.weight", False),
    ("embeddings.LayerNorm.bias", "embeddings.layer_norm.bias", False),
    ("encoder.layer.{i}.attention.self.query.weight", "encoder.layers.{i}.self_attn.q_proj.weight", True),
    ("encoder.layer.{i}.attention.self.query.bias", "encoder.layers.{i}.self_attn.q_proj.bias", False),
    ("encoder.layer.{i}.attention.self.key.weight", "encoder.layers.{i}.self_attn.k_proj.weight", True),
    ("encoder.layer.{i}.attention.self.key.bias", "encoder.layers.{i}.self_attn.k_proj.bias", False),
    ("encoder.layer.{i}.attention.self.value.weight", "encoder.layers.{i}.self_attn.v_proj.weight", True),
    ("encoder.layer.{i}.attention.self.value.bias", "encoder.layers.{i}.self_attn.v_proj.bias", False),
    ("encoder.layer.{i}.attention.output.dense.weight", "encoder.layers.{i}.self_attn.out_proj.weight", True),
    ("encoder.layer.{i}.attention.output.dense.bias", "encoder.layers.{i}.self_attn.out_proj.bias", False),
    ("encoder.layer.{i}.attention.output.LayerNorm.weight", "encoder.layers.{i}.norm1.weight", False),
    ("encoder.layer.{i}.attention.output.LayerNorm.bias", "encoder.layers.{i}.norm1.bias", False),
    ("encoder.layer.{i}.intermediate.dense.weight", "encoder.layers.{i}.linear1.weight", True),
    ("encoder.layer.{i}.intermediate.dense.bias", "encoder.layers.{i}.linear1.bias", False),
    ("encoder.layer.{i}.output.dense.weight", "encoder.layers.{i}.linear2.weight", True),
    ("encoder.layer.{i}.output.dense.bias", "encoder.layers.{i}.linear2.bias", False),
    ("encoder.layer.{i}.output.LayerNorm.weight", "encoder.layers.{i}.norm2.weight", False),
    ("encoder.layer.{i}.output.LayerNorm.bias", "encoder.layers.{i}.norm2.bias", False),
    ("pooler.dense.weight", "pooler.dense.weight", True),
    ("pooler.dense.bias", "pooler.dense.bias", False),
)
# Head tensors (outside the base model, in both libraries), per ernie_ft head.
HEAD_NAMES = {
    "sequence": (("classifier.weight", "classifier.weight", True), ("classifier.bias", "classifier.bias", False)),
    "token": (("classifier.weight", "classifier.weight", True), ("classifier.bias", "classifier.bias", False)),
    "span": (("qa_outputs.weight", "classifier.weight", True), ("qa_outputs.bias", "classifier.bias", False)),
    "mlm": (
        ("cls.predictions.transform.dense.weight", "cls.predictions.transform.weight", True),
        ("cls.predictions.transform.dense.bias", "cls.predictions.transform.bias", False),
        ("cls.predictions.transform.LayerNorm.weight", "cls.predictions.layer_norm.weight", False),
        ("cls.predictions.transform.LayerNorm.bias", "cls.predictions.layer_norm.bias", False),
        ("cls.predictions.bias", "cls.predictions.decoder_bias", False),
    ),
}
LEGACY = (("LayerNorm.gamma", "LayerNorm.weight"), ("LayerNorm.beta", "LayerNorm.bias"))
"""Old BERT checkpoints' names (TensorFlow conversions), read on loading; export writes today's names."""
IGNORED = re.compile(
    r"(.*\.)?embeddings\.position_ids|cls\.predictions\.decoder\.(weight|bias)|cls\.seq_relationship\..*"
)
"""Buffers and tied copies transformers may store: never weights of their own."""
HEAD_OF_ARCHITECTURE = {
    "ForSequenceClassification": "sequence",
    "ForTokenClassification": "token",
    "ForQuestionAnswering": "span",
    "ForMaskedLM": "mlm",
    "ForPreTraining": "mlm",
}
UNPOOLED_HEADS = ("token", "span", "mlm")
"""Heads that do not read the pooler: transformers builds their models without one."""
ACTIVATIONS = ("gelu", "relu")


def read_config(path: str) -> dict | None:
    """``path``'s transformers config (a dict) when it is a transformers BERT or ERNIE checkpoint, else None.

    PaddleNLP writes ``model_type`` too, with a ``paddlenlp_version`` key beside it; the tensor names decide when
    the key is absent (transformers' ``encoder.layer.N`` against PaddleNLP's ``encoder.layers.N``).
    """
    file = os.path.join(path, "config.json")
    if not os.path.isfile(file):
        return None
    try:
        with open(file, encoding="utf-8") as f:
            config = json.load(f)
    except (ValueError, UnicodeDecodeError):
        return None
    return transformers_config(config, path)


def transformers_config(config, path: str, files=None) -> dict | None:
    """``config`` (``path``'s config.json, parsed) when ``path`` is a transformers BERT or ERNIE checkpoint, else
    None (see ``read_config``); ``files``: the names in ``path`` when already listed."""
    if not isinstance(config, dict) or config.get("model_type") not in MODEL_TYPES or "paddlenlp_version" in config:
        return None
    names = stored_names(path, files)
    if names is None:  # no safetensors: transformers' own weight files, refused by ``check_weights``
        return config if any(has_file(path, name, files) for name in PICKLES) else None
    return config if any(".encoder.layer." in n or n.startswith("encoder.layer.") for n in names) else None


def head_of(config: dict) -> str | None:
    """The ernie_ft head of the checkpoint's architecture (``BertForSequenceClassification``: 'sequence'); None
    for a bare encoder."""
    for architecture in config.get("architectures") or ():
        for suffix, head in HEAD_OF_ARCHITECTURE.items():
            if architecture.endswith(suffix):
                return head
    return None


def labels_of(config: dict) -> list[str]:
    """The labels in id order from ``id2label`` (keys are strings in config.json)."""
    id2label = config.get("id2label") or {}
    return [str(id2label[key]) for key in sorted(id2label, key=int)]


def check_weights(path: str, config: dict, flag: str = "--model", files=None) -> None:
    """Refuse a checkpoint whose weights are a pickle, with the command that writes safetensors beside them;
    ``files``: the names in ``path`` when already listed."""
    if has_file(path, SAFE_WEIGHTS, files) or has_file(path, SAFE_INDEX, files):
        return
    found = [name for name in PICKLES if has_file(path, name, files)]
    cls = (config.get("architectures") or ["AutoModel"])[0]
    raise UserError(
        f"{flag} {path}: its weights are {' and '.join(found) or 'missing'}, not {SAFE_WEIGHTS}; ernie_ft reads "
        "safetensors only (a pickle can run code hidden in it) and never needs torch. Where torch and transformers "
        f"are installed: python -c \"import transformers; transformers.{cls}.from_pretrained('{path}')"
        f".save_pretrained('{path}', safe_serialization=True)\""
    )


def read_weights(path: str) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint's safetensors (one file or the shards an index names)."""
    from safetensors.numpy import load_file

    index = os.path.join(path, SAFE_INDEX)
    if not os.path.isfile(index):
        return load_file(os.path.join(path, SAFE_WEIGHTS))
    with open(index, encoding="utf-8") as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    state = {}
    for shard in shards:
        state.update(load_file(os.path.join(path, shard)))
    return state


def _rows(num_layers: int, head: str | None):
    """(transformers name, PaddleNLP name, transposed) for every tensor of a model, base names unprefixed."""
    for hf_name, paddle_name, transposed in NAMES:
        layers = range(num_layers) if "{i}" in hf_name else (None,)
        for i in layers:
            yield hf_name.format(i=i), PADDLE_PREFIX + paddle_name.format(i=i), transposed, True
    for hf_name, paddle_name, transposed in HEAD_NAMES.get(head, ()):
        yield hf_name, paddle_name, transposed, False


def to_paddle(state: dict, config: dict, head: str | None) -> tuple[dict, list[str]]:
    """(PaddleNLP state dict, names of ``state`` that no row read) for transformers tensors ``state``."""
    prefix = config["model_type"] + "."
    renamed = {legacy_name(name): value for name, value in state.items()}
    out, used = {}, set()
    for hf_name, paddle_name, transposed, in_base in _rows(config["num_hidden_layers"], head):
        for candidate in (prefix + hf_name, hf_name) if in_base else (hf_name,):
            if candidate in renamed:
                value = renamed[candidate]
                out[paddle_name] = np.ascontiguousarray(value.T if transposed else value)
                used.add(candidate)
                break
    unused = sorted(n for n in renamed if n not in used and not IGNORED.fullmatch(n))
    return out, unused


def legacy_name(name: str) -> str:
    """Today's transformers name for a tensor name of an old BERT checkpoint (``LayerNorm.gamma``)."""
    for old, new in LEGACY:
        name = name.replace(old, new)
    return name


def to_hf(state: dict, model_type: str, num_layers: int, head: str | None) -> dict:
    """transformers tensors for a PaddleNLP state dict (the inverse of ``to_paddle``). A head that does not read the
    pooler leaves it out, as transformers builds those models without one."""
    out = {}
    for hf_name, paddle_name, transposed, in_base in _rows(num_layers, head):
        if paddle_name not in state or (hf_name.startswith("pooler.") and head in UNPOOLED_HEADS):
            continue
        value = np.asarray(state[paddle_name])
        out[(model_type + "." if in_base else "") + hf_name] = np.ascontiguousarray(value.T if transposed else value)
    return out


def paddle_config(config: dict, path: str, flag: str = "--model") -> dict:
    """PaddleNLP ErnieConfig keywords for a transformers config; a setting PaddleNLP's ERNIE cannot run is an
    error naming it."""
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise UserError(
            f"{flag} {path}: hidden_act {act!r} in config.json is not supported "
            f"(ernie_ft runs {', '.join(ACTIVATIONS)})"
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise UserError(
            f"{flag} {path}: position_embedding_type {config['position_embedding_type']!r} is not supported "
            "(ernie_ft runs absolute position embeddings)"
        )
    keys = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "max_position_embeddings",
        "type_vocab_size",
        "initializer_range",
        "layer_norm_eps",
    )
    out = {key: config[key] for key in keys if key in config}
    out.update(
        hidden_act=act,
        pad_token_id=config.get("pad_token_id") or 0,
        use_task_id=bool(config.get("use_task_id", False)),
        task_type_vocab_size=config.get("task_type_vocab_size", 3),
        layer_norm_eps=config.get("layer_norm_eps", 1e-12),
    )
    if config.get("id2label"):
        out["num_labels"] = len(config["id2label"])
    return out


def hf_config(
    config, model_type: str, head: str | None, labels: list[str], architecture: str, problem_type: str | None = None
) -> dict:
    """A transformers config.json for a PaddleNLP ErnieConfig ``config``; ``problem_type`` (a sequence head's:
    "single_label_classification" or "multi_label_classification") tells transformers its loss."""
    out = {
        "architectures": [architecture],
        "model_type": model_type,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": config.hidden_act,
        "hidden_dropout_prob": config.hidden_dropout_prob,
        "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": layer_norm_eps(config),
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
    }
    if model_type == "ernie":
        out.update(use_task_id=bool(config.use_task_id), task_type_vocab_size=config.task_type_vocab_size)
    if head in ("sequence", "token") and labels:
        out["id2label"] = {str(i): label for i, label in enumerate(labels)}
        out["label2id"] = {label: i for i, label in enumerate(labels)}
    if problem_type:
        out["problem_type"] = problem_type
    return out


MULTI_LABEL = "multi_label_classification"
"""transformers' ``problem_type`` of a classifier with a sigmoid per label."""


def is_multi_label(config: dict) -> bool:
    """Whether a transformers config.json is a multi-label classifier's (``problem_type``)."""
    return config.get("problem_type") == MULTI_LABEL


def load(cls, path: str, head: str | None, flag: str = "--model", *, source=None, **overrides):
    """(``cls`` built from the transformers checkpoint ``path``, a line on what was not loaded or None).

    ``head``: the ernie_ft head of ``cls`` (which head tensors to read). ``source``: ``path`` already read (a
    ``model_dir.ModelDir``), else it is read here. ``overrides``: ErnieConfig keywords (dropout, ``num_labels``).
    A head tensor whose shape differs (another number of labels) is left newly initialised, and said so.
    """
    import paddle
    import paddlenlp.transformers as pt

    config = source.hf_config if source is not None else read_config(path)
    check_weights(path, config, flag, source.files if source is not None else None)
    net = cls(pt.ErnieConfig(**{**paddle_config(config, path, flag), **overrides}))
    state, unused = to_paddle(read_weights(path), config, head)
    own = net.state_dict()
    if not any(name.startswith(PADDLE_PREFIX) for name in own):  # the bare encoder: its names have no prefix
        state = {name.removeprefix(PADDLE_PREFIX): value for name, value in state.items()}
    fits = {name: value for name, value in state.items() if name in own and tuple(own[name].shape) == value.shape}
    net.set_state_dict({name: paddle.to_tensor(value) for name, value in fits.items()})
    apply_layer_norm_eps(net)
    loaded = {id(own[name]) for name in fits}  # a tied weight (the MLM decoder) is loaded with its twin
    new = [n for n in own if id(own[n]) not in loaded and not ("pooler." in n and head in UNPOOLED_HEADS)]
    return net, loading_line(len(fits), len(own), new, unused, source="transformers checkpoint")
