"""A pipeline in a checkpoint or tokenizer directory: what ``TextPipeline.from_dir`` reads (a directory saved by
ernie_ft, by PaddleNLP or by transformers) and what ``TextPipeline.save`` writes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ernie_ft.errors import UserError
from ernie_ft.text.hf_tokenizer import hf_settings
from ernie_ft.text.vocab_files import read_json

META_FILE = "ernie_ft_text.json"
_USER_DICT_FILE = "jieba_user_dict.txt"
_EXTENSION_DIR = "vocab_extension"


class _Listing:
    """A directory's files and JSON settings, from the directory itself or from what its caller already read
    (``models.model_dir.read_model_dir`` gives its names and parsed files, so nothing is read twice)."""

    def __init__(self, directory: str, files=None, jsons: dict | None = None):
        self.d, self.files, self.jsons = Path(directory), files, jsons or {}

    def has(self, name: str) -> bool:
        return name in self.files if self.files is not None else (self.d / name).is_file()

    def json(self, name: str) -> dict:
        return self.jsons[name] if name in self.jsons else read_json(self.d / name)


def is_hf_tokenizer_dir(directory: str, files=None, jsons: dict | None = None) -> bool:
    """Whether ``directory`` holds a transformers BERT-style tokenizer (rules "bert"), not one saved by ernie_ft
    or PaddleNLP: tokenizer_config.json names BertTokenizer(Fast), or without a tokenizer class config.json's
    model_type is bert or ernie, or there is only a tokenizer.json; never with PaddleNLP's paddlenlp_version.
    ``files``, ``jsons``: the directory's file names and its JSON files already read (name: object), if known."""
    listing = _Listing(directory, files, jsons)
    if listing.has(META_FILE):
        return False
    model = listing.json("config.json")
    if "paddlenlp_version" in model:
        return False
    config = listing.json("tokenizer_config.json")
    if config.get("tokenizer_class"):
        return config["tokenizer_class"] in ("BertTokenizer", "BertTokenizerFast")
    if model:
        return model.get("model_type") in ("bert", "ernie")
    return not config and not listing.has("vocab.txt") and listing.has("tokenizer.json")


def read_tokenizer_dir(directory: str, rules: str | None, files=None, jsons: dict | None = None) -> tuple[str, dict]:
    """The vocabulary file and TextPipeline keywords of a directory (see ``TextPipeline.from_dir``);
    ``rules``: these rules instead of the recorded ones; ``files``, ``jsons``: as for ``is_hf_tokenizer_dir``."""
    d = Path(directory)
    listing = _Listing(directory, files, jsons)
    vocab = d / "vocab.txt" if listing.has("vocab.txt") else d / "tokenizer.json"
    if not listing.has(vocab.name):
        raise UserError(
            f"{d}: no vocab.txt or tokenizer.json in this directory; give a checkpoint directory "
            "saved by ernie_ft, by PaddleNLP's or by transformers' save_pretrained"
        )
    config = listing.json("tokenizer_config.json")
    meta = listing.json(META_FILE)
    kwargs: dict = {}
    if is_hf_tokenizer_dir(str(d), files, {**listing.jsons, "tokenizer_config.json": config, META_FILE: meta}):
        kwargs = hf_settings(d, config)
    else:
        if "do_lower_case" in config:
            kwargs["lowercase"] = bool(config["do_lower_case"])
        if not meta:  # saved by PaddleNLP itself (ernie_ft always writes its file): ErnieTokenizer's ids
            kwargs["rules"] = "paddlenlp"
    for key in ("lowercase", "segment", "exact_spans", "tokenize_chinese_chars"):
        if key in meta:
            kwargs[key] = bool(meta[key])
    for key in ("rules", "strip_accents"):
        if meta.get(key) is not None:
            kwargs[key] = meta[key]
    for key in ("user_dict", "vocab_extension"):
        if meta.get(key):
            kwargs[key] = str(d / meta[key])
    if rules is not None:
        kwargs["rules"] = rules
    if kwargs.get("rules", "ernie_ft") != "bert":
        kwargs.pop("strip_accents", None)
        kwargs.pop("tokenize_chinese_chars", None)
    return str(vocab), kwargs


def write_tokenizer_dir(
    directory: str, vocab_file: str, lines: list[str], meta: dict, user_dict: str | None, extension
) -> None:
    """``TextPipeline.save``: vocab.txt and tokenizer_config.json (PaddleNLP ErnieTokenizer format) of the
    vocabulary ``vocab_file`` (whose lines are ``lines``), ernie_ft_text.json holding ``meta`` (the settings)
    with the names of the copied user dictionary and of the saved vocabulary extension."""
    from paddlenlp.transformers import ErnieTokenizer

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if vocab_file.endswith(".json"):  # a tokenizer.json's vocabulary: written out line by line, ids kept
        vocab_file = str(out / "vocab.txt")
        Path(vocab_file).write_text("".join(t + "\n" for t in lines), encoding="utf-8")
    ErnieTokenizer(vocab_file, do_lower_case=meta["lowercase"]).save_pretrained(str(out))
    meta = dict(meta)
    if extension is not None:
        extension.save(str(out / _EXTENSION_DIR))
        meta["vocab_extension"] = _EXTENSION_DIR
    if user_dict is not None:
        target = out / _USER_DICT_FILE
        if not (target.exists() and os.path.samefile(user_dict, target)):
            shutil.copyfile(user_dict, target)
        meta["user_dict"] = _USER_DICT_FILE
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def saved_extension(directory: str) -> str | None:
    """The vocabulary extension saved in a checkpoint directory (its weights already have the rows)."""
    name = read_json(Path(directory) / META_FILE).get("vocab_extension")
    return str(Path(directory) / name) if name else None
