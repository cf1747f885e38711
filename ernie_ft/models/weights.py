"""Model weights on disk: safetensors, or a pickle only when the user trusts it.

A pickle (Paddle's ``model_state.pdparams``) can run any code when it is loaded; safetensors hold
only tensors. Every ernie_ft command that opens a model directory asks ``weights_format`` first.
"""

from __future__ import annotations

import os
import re

from ernie_ft.errors import UserError

SAFE_WEIGHTS, SAFE_INDEX, PICKLE_WEIGHTS = "model.safetensors", "model.safetensors.index.json", "model_state.pdparams"


def weights_format(path: str, trust_pickle: bool = False, flag: str = "--model", files=None) -> str:
    """How a model directory's weights are stored: "safetensors", or "pickle" when the user trusts it.

    A pickle can run any code when it is loaded, so a directory with only ``model_state.pdparams``
    (ernie_ft before safetensors, PaddleNLP's own format) is refused without ``trust_pickle``.
    With safetensors present, a pickle beside them is never read. ``files``: the names in ``path`` when already
    listed (``model_dir.ModelDir.files``).
    """
    if has_file(path, SAFE_WEIGHTS, files) or has_file(path, SAFE_INDEX, files):
        return "safetensors"
    if has_file(path, PICKLE_WEIGHTS, files):
        if trust_pickle:
            return "pickle"
        raise UserError(
            f"{flag} {path}: its weights are a pickle ({PICKLE_WEIGHTS}), and loading a pickle can run "
            "code hidden in it. If you trust where this directory came from (ernie_ft checkpoints "
            "before safetensors, models saved by PaddleNLP), pass --trust-pickle; re-saving it then "
            "(e.g. python -m ernie_ft export) writes safetensors"
        )
    raise UserError(f"{flag} {path}: no model weights ({SAFE_WEIGHTS} or {PICKLE_WEIGHTS})")


def has_file(path: str, name: str, files=None) -> bool:
    """Whether ``path`` holds the file ``name``, answered from ``files`` (the names in ``path``) when given."""
    return name in files if files is not None else os.path.isfile(os.path.join(path, name))


def from_pretrained(cls, path: str, trust_pickle: bool = False, flag: str = "--model", *, files=None, **overrides):
    """``cls.from_pretrained(path)`` that reads safetensors, or a pickle only when trusted: the format
    is decided (and a pickle refused) before PaddleNLP opens any file. ``files``: as for ``weights_format``."""
    fmt = weights_format(path, trust_pickle, flag, files)
    net = cls.from_pretrained(path, use_safetensors=fmt == "safetensors", **overrides)
    apply_layer_norm_eps(net)  # PaddleNLP sets 1e-12 whatever config.json says (1e-5 in a model from transformers)
    return net


def stored_names(path: str, files=None) -> set[str] | None:
    """The tensor names in a model directory's safetensors (None for a pickle: not opened here); ``files``: as for
    ``weights_format``."""
    import json

    index = os.path.join(path, SAFE_INDEX)
    if has_file(path, SAFE_INDEX, files):
        with open(index, encoding="utf-8") as f:
            return set(json.load(f)["weight_map"])
    if not has_file(path, SAFE_WEIGHTS, files):
        return None
    from safetensors import safe_open

    with safe_open(os.path.join(path, SAFE_WEIGHTS), framework="np") as f:
        return set(f.keys())


def describe_loading(model, path: str, prefix: str = "ernie.", files=None) -> str | None:
    """One line: which of ``model``'s weights ``path`` did not hold (newly initialised) and which stored
    tensors went unused (another head's); None when every weight came from the checkpoint. ``files``: as for
    ``weights_format``."""
    stored = stored_names(path, files)
    if stored is None:
        return None
    own = list(model.state_dict())
    known = {name for name in own if name in stored or name.removeprefix(prefix) in stored}
    new = [name for name in own if name not in known]
    used = known | {name.removeprefix(prefix) for name in known}
    return loading_line(len(known), len(own), new, sorted(stored - used))


def loading_line(loaded: int, total: int, new: list[str], unused: list[str], source: str = "checkpoint") -> str | None:
    """'N of M weights loaded from the ``source``; newly initialised: ...; not used: ...', or None when nothing is new
    or left over."""
    if not new and not unused:
        return None

    def heads(names):  # classifier.weight -> classifier.*, cls.predictions.decoder.bias -> cls.predictions.*
        return ", ".join(sorted({".".join(n.split(".")[: 2 if n.count(".") > 1 else 1]) + ".*" for n in names}))

    line = f"{loaded} of {total} weights loaded from the {source}"
    if new:
        line += f"; newly initialised: {heads(new)} ({len(new)} tensors)"
    if unused:
        line += f"; not used: {heads(unused)} ({len(unused)} tensors)"
    return line


def new_head(net, cls, num_labels: int | None):
    """(a model of ``cls`` with ``net``'s encoder and the random head a new model starts with, for ``num_labels``
    outputs (None: ``net``'s), the loading line that says so): ``--new-head``, where the checkpoint's head was trained
    for other labels. ``net`` is the checkpoint loaded as it was saved."""
    config = net.config
    if num_labels is not None:
        config.num_labels = num_labels
    fresh, prefix = cls(config), net.base_model_prefix + "."
    fresh.set_state_dict({name: value for name, value in net.state_dict().items() if name.startswith(prefix)})
    apply_layer_norm_eps(fresh)
    own = fresh.state_dict()
    head = [name for name in own if not name.startswith(prefix)]
    return fresh, loading_line(len(own) - len(head), len(own), head, [])


def head_mismatch(
    spec: str, error: str, prefix: str, labels: list | None, num_labels: int | None, stored: set | None = None
) -> UserError | None:
    """The error for a checkpoint whose head alone has other shapes than this run's (``error``: Paddle's message
    naming each weight it skipped): it was trained for other labels, and ``--new-head`` is the fix. None when an
    encoder weight differs too (another model's checkpoint, or a config that does not fit its weights: not this).
    PaddleNLP names an encoder weight without the ``prefix`` (``encoder.layers.0.linear1.weight``): ``stored``, the
    checkpoint's tensor names (``stored_names``), tells them from the head's; a checkpoint of the encoder alone (no name
    under the prefix) has no head to replace."""
    skipped = re.findall(r"Skip loading for (\S+)\. ", error)
    stored = stored or set()
    under = {name[len(prefix) + 1 :] for name in stored if name.startswith(prefix + ".")}
    encoder = under if under else stored
    if not skipped or any(name.startswith(prefix + ".") or name in encoder for name in skipped):
        return None
    trained = " has other shapes than this run needs"
    if labels is not None:
        shown = ", ".join(map(str, labels[:6])) + (", ..." if len(labels) > 6 else "")
        trained = f" was trained on {len(labels)} labels ({shown}), this run learns {num_labels or 'others'}"
    return UserError(
        f"--model {spec}: its task head{trained}; to fine-tune it on "
        "another label set, pass --new-head (the head starts from random weights, the encoder from the checkpoint)"
    )


def layer_norm_eps(config) -> float:
    """The LayerNorm epsilon a config asks for (PaddleNLP's ERNIE runs 1e-12 whatever its config says)."""
    return float(getattr(config, "layer_norm_eps", None) or 1e-12)


def apply_layer_norm_eps(net) -> None:
    """Set every LayerNorm of ``net`` to its config's ``layer_norm_eps``: PaddleNLP's ERNIE initialises all of them
    to 1e-12, while BERT uses 1e-12 and the transformers ports of ERNIE 3.0 1e-5."""
    import paddle

    eps = layer_norm_eps(net.config)
    for layer in net.sublayers():
        if isinstance(layer, paddle.nn.LayerNorm):
            layer._epsilon = eps
