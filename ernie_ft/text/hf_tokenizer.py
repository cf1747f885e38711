"""transformers tokenizer directories: the pipeline settings one stands for (``hf_settings``, read by
``TextPipeline.from_dir``) and the directory ``TextPipeline.save_hf`` writes, with the differences that remain."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer, normalizers

from ernie_ft.errors import UserError
from ernie_ft.text.rules import class_of, dropped_points, rust_tokenizer
from ernie_ft.text.vocab_files import SPECIAL_TOKENS, hf_vocab_lines, tokenizer_json


def hf_settings(d: Path, config: dict) -> dict:
    """TextPipeline keywords of the transformers tokenizer directory ``d`` whose tokenizer_config.json holds
    ``config`` (see ``TextPipeline.from_dir``)."""
    if config.get("do_basic_tokenize") is False:
        raise UserError(
            f"{d / 'tokenizer_config.json'}: do_basic_tokenize is false (WordPiece on raw whitespace words); "
            "ernie_ft follows BertTokenizer's basic tokenization only"
        )
    keys = ("do_lower_case", "strip_accents", "tokenize_chinese_chars")
    normalizer: dict = {}
    if (d / "tokenizer.json").is_file() and not all(k in config for k in keys):
        normalizer = tokenizer_json(d / "tokenizer.json").get("normalizer") or {}
        normalizer = normalizer if normalizer.get("type") == "BertNormalizer" else {}
    rules = config.get("ernie_ft_rules", "bert")  # tokenizers written by save_hf say whose rules they follow
    kwargs = {"rules": rules, "lowercase": bool(config.get("do_lower_case", normalizer.get("lowercase", True)))}
    if rules == "bert":
        kwargs["strip_accents"] = config.get("strip_accents", normalizer.get("strip_accents"))
        kwargs["tokenize_chinese_chars"] = config.get(
            "tokenize_chinese_chars", normalizer.get("handle_chinese_chars", True)
        )
    return kwargs


def write_hf_tokenizer(
    pipeline, directory: str, lines: list[str], chars: dict[str, str] | None, model_max_length: int | None
) -> list[str]:
    """``TextPipeline.save_hf``: the files of a transformers tokenizer for ``pipeline``, whose vocabulary has
    ``lines`` and whose rules change the characters ``chars`` (``rules.char_map``; None for rules "bert").
    Returns the differences that remain, one sentence each."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    hf_lines = hf_vocab_lines(lines)
    (out / "vocab.txt").write_text("".join(t + "\n" for t in hf_lines), encoding="utf-8")
    special = dict(zip(("pad_token", "cls_token", "sep_token", "mask_token", "unk_token"), SPECIAL_TOKENS))
    config: dict = {
        "tokenizer_class": "BertTokenizer" if pipeline.rules == "bert" else "BertTokenizerFast",
        "do_lower_case": pipeline.lowercase,
        "strip_accents": pipeline.strip_accents,
        "tokenize_chinese_chars": pipeline.tokenize_chinese_chars,
        "do_basic_tokenize": True,
        **special,
    }
    if model_max_length is not None:
        config["model_max_length"] = int(model_max_length)
    differences = list(_HF_DIFFERENCES[pipeline.rules])
    if pipeline.rules != "bert":
        config["ernie_ft_rules"] = pipeline.rules  # read back by from_dir
        vocab = {t: i for i, t in enumerate(hf_lines)}
        _fast_tokenizer(pipeline, vocab, chars).save(str(out / "tokenizer.json"))
    if pipeline.extension is not None:
        differences.append(
            f"The vocabulary extension's {len(pipeline.extension.pieces)} pieces (ids from {len(lines)}) are "
            "placed on jieba words, which a transformers tokenizer cannot do: it never produces them."
        )
    for name, value in (("tokenizer_config.json", config), ("special_tokens_map.json", special)):
        (out / name).write_text(json.dumps(value, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return differences


def _fast_tokenizer(pipeline, vocab: dict, chars: dict[str, str]) -> Tokenizer:
    """The pipeline's Rust tokenizer with its Python character map in front (a precompiled charsmap, the
    normaliser tokenizers has for arbitrary character maps), BERT's [CLS]/[SEP] template and decoder."""
    from tokenizers import decoders, processors

    tok = rust_tokenizer(vocab, pipeline.rules, pipeline.lowercase, pipeline.tokenize_chinese_chars)
    steps = [normalizers.Precompiled(_precompiled_charsmap(chars))]
    if pipeline.rules == "paddlenlp":  # dropped characters by Python's tables (most of them unassigned ones)
        steps.insert(0, normalizers.Replace(tokenizers.Regex(class_of(dropped_points())), ""))
    tok.normalizer = normalizers.Sequence(steps + ([tok.normalizer] if tok.normalizer is not None else []))
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def _precompiled_charsmap(mapping: dict[str, str]) -> bytes:
    """A sentencepiece precompiled charsmap (tokenizers' ``Precompiled`` normaliser) of a character map."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    stderr = 2  # C's stderr, whatever sys.stderr is
    sys.stderr.flush()
    saved = os.dup(stderr)
    try:  # sentencepiece's C++ logging writes straight to file descriptor 2
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), stderr)
            spec = spm.SentencePieceNormalizer(
                norm_map=sorted(mapping.items()),
                add_dummy_prefix=False,
                escape_whitespaces=False,
                remove_extra_whitespaces=False,
            ).serialized_normalizer_spec()
    finally:
        os.dup2(saved, stderr)
        os.close(saved)
    parsed = sentencepiece_model_pb2.NormalizerSpec()
    parsed.ParseFromString(spec)
    return parsed.precompiled_charsmap


_HF_DIFFERENCES = {
    "bert": (
        "AutoTokenizer gives BertTokenizerFast, which transformers converts from vocab.txt; it differs from "
        "BertTokenizer, whose rules ernie_ft follows, on rare characters only: code points Unicode 14 leaves "
        "unassigned, punctuation newer than the tokenizers library's tables, decomposed accents when cased (no "
        "NFC) and U+2B820-U+2B91F (not split as Chinese characters). BertTokenizer gives ernie_ft's ids exactly.",
    ),
    "ernie_ft": (
        "Only the fast tokenizer (tokenizer.json: AutoTokenizer, BertTokenizerFast) applies ernie_ft's rules; "
        "BertTokenizer (slow) reads vocab.txt alone, so it keeps full-width forms and does not split symbols.",
        "A character that ernie_ft's NFKC map changes, followed by combining marks (e.g. 'Ａ' + U+0301), is mapped "
        "with its marks as one unit in tokenizer.json and loses them; ernie_ft keeps them (lower-cased models "
        "strip them either way).",
        "[CLS], [SEP], [PAD], [MASK] and [UNK] written in a text are one special token each in transformers; "
        "ernie_ft splits them like other text.",
    ),
    "paddlenlp": (
        "Only the fast tokenizer (tokenizer.json: AutoTokenizer, BertTokenizerFast) applies PaddleNLP's rules; "
        "BertTokenizer (slow) reads vocab.txt alone, so it does not split symbols such as '～' from words.",
        "A character that PaddleNLP lower-cases or strips of accents, followed by combining marks, is mapped with "
        "its marks as one unit in tokenizer.json and loses them; PaddleNLP keeps them only when cased.",
    ),
}
