"""Named-entity recognition: ``python -m ernie_ft.ner``.

Entities stay character spans of the original text from the file to the prediction. The model
sees BIO tags on the first token of each character or word, found through the text pipeline's
character offsets (never by assuming one token per character); windows over long texts are
stitched per token, and decoded tags are mapped back to character spans.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from ernie_ft.data.windows import token_windows, window_owner
from ernie_ft.dev_split import split_dev
from ernie_ft.errors import UserError
from ernie_ft.evaluation.entities import entity_metrics
from ernie_ft.label_set import check_known_labels, warn_rare_labels
from ernie_ft.ner.formats import FORMATS, check_choice, read_ner, read_ner_records
from ernie_ft.ner.tags import OVERLAPPING, parse_tag, tags_to_spans
from ernie_ft.task import TaskHooks, resolve_task

_CONTINUATION: dict = {}


def continuation_ids(pipeline) -> frozenset:
    """Ids of WordPiece continuation pieces ('##13'): they never start a character or a word."""
    if pipeline.fingerprint not in _CONTINUATION:
        vocab = getattr(pipeline, "vocab", None)  # token -> id; older pipelines keep it in the tokenizer only
        vocab = vocab if vocab is not None else pipeline._tok.get_vocab()
        _CONTINUATION[pipeline.fingerprint] = frozenset(i for token, i in vocab.items() if token.startswith("##"))
    return _CONTINUATION[pipeline.fingerprint]


def token_units(encoding, continuation: frozenset) -> list[tuple[int, int, int]]:
    """(token index, first character, end character) of each unit that carries a tag.

    A unit is a token that covers a character no earlier token covered and is not a
    continuation piece; continuation pieces extend the unit before them ('iphone' '##13' is one
    unit over 'iPhone13'), and tokens that only repeat covered characters (the 2nd and 3rd '.'
    of '…') belong to none. Characters without any token (zero-width marks) lie between units.
    """
    units, covered = [], 0
    for t, (token_id, (start, end)) in enumerate(zip(encoding.ids, encoding.offsets)):
        if token_id in continuation and units:
            units[-1][2] = max(units[-1][2], end)
        elif end > covered:
            units.append([t, max(start, covered), end])
        covered = max(covered, end)
    return [tuple(u) for u in units]


def unit_tags(entities, units, n_chars: int) -> list[str]:
    """BIO tag of each unit: the entity holding its first character, B- on an entity's first unit."""
    owner = [-1] * n_chars
    for k, (start, end, _) in enumerate(entities):
        owner[start:end] = [k] * (end - start)
    tags, previous = [], -1
    for _, start, _ in units:
        k = owner[start]
        tags.append("O" if k < 0 else f"{'I' if k == previous else 'B'}-{entities[k][2]}")
        previous = k
    return tags


def units_to_spans(tags: list[str], units) -> tuple[list[tuple[int, int, str]], list[int]]:
    """Character spans of the entities in unit tags, and the units whose tag the decode repaired."""
    positions, invalid = tags_to_spans([parse_tag(tag, "tag") for tag in tags], "bio")
    return [(units[s][1], units[e - 1][2], kind) for s, e, kind in positions], invalid


def stitch(logits: list, features: list[dict], n_docs: int) -> list[np.ndarray]:
    """One logits row per token of each document, taken from the window in which that token lies
    farthest from an edge that cuts the text (the text's own start and end are not such edges)."""
    by_doc: list[list[int]] = [[] for _ in range(n_docs)]
    for i, f in enumerate(features):
        by_doc[f["doc"]].append(i)
    width = logits[0].shape[-1]
    rows = []
    for indices in by_doc:
        windows = [features[i]["_window"] for i in indices]
        n_tokens = max((end for _, end in windows), default=0)
        owner = window_owner(windows, n_tokens, open_ends=True)
        doc_rows = np.zeros((n_tokens, width), dtype="float32")
        for k, (i, (start, end)) in enumerate(zip(indices, windows)):
            mine = owner[start:end] == k
            doc_rows[start:end][mine] = logits[i][1 : 1 + end - start][mine]  # row 0 is [CLS]
        rows.append(doc_rows)
    return rows


def note_inexact(inexact: list, consequence: str) -> None:
    """Say on stderr which (example, entity) pairs start or end inside a token, and what that means for the model."""
    if inexact:
        shown = "; ".join(f"line {e.line}: {e.text[s:t]!r} [{s}, {t}) {k}" for e, (s, t, k) in inexact[:5])
        print(
            f"note: {inexact[0][0].source}: {len(inexact)} entities start or end inside a token (or on characters "
            f"that produce no token), so {consequence} and count as errors when scored ({shown})",
            file=sys.stderr,
        )


def entity_types(labels: list[str]) -> list[str]:
    """The entity types of a BIO tag list, sorted."""
    return sorted({label[2:] for label in labels if label != "O"})


@dataclass
class NER(TaskHooks):
    """Entities as character spans; BIO tags on the first token of each character or word."""

    name: str = "ner"
    head: str = "token"
    metric: str = "f1"
    input_fields: ClassVar[tuple] = (("text",), ())
    reads_records_apart: ClassVar[bool] = True
    binds_model: ClassVar[bool] = True
    binds_saved_arrays: ClassVar[bool] = True  # the CRF's transitions, read as an array: an export runs without Paddle
    distillation: ClassVar[str] = "ernie_ft.distill.ner:NerDistillation"  # named, not imported: distill builds on this
    crf: bool = False
    """Add a CRF layer: learned tag-transition scores, the sequence likelihood as the loss, and a
    Viterbi decode that only yields valid tag sequences."""
    format: str = "auto"
    """Input format: auto, conll (a token and its tag per line; BIO, BIOES/BMES or IO tags), cluener
    (JSONL, inclusive ends), spans (JSONL, exclusive ends), text (unlabelled, one per line), doccano (JSONL)
    or label-studio (a JSON export); auto tells them apart by their content."""
    overlapping: str = "error"
    """Overlapping entities in a file: error, or keep-longest (drop the shorter one, reported)."""
    constrained: bool = True
    """Decode the softmax tagger to the most probable valid BIO sequence; --no-constrained takes each
    token's argmax and repairs it as conlleval does (an I- without its B- starts an entity). The CRF
    always decodes valid sequences."""
    nested: bool = False
    """Nested and overlapping entities (one span may carry two types): a GlobalPointer span model instead of the
    tagger (ernie_ft/ner/nested.py)."""
    threshold: Optional[float] = None
    """With ``nested``: the probability (0 to 1) above which a span is an entity; default 0.5."""
    tune_thresholds: bool = False
    """With ``nested``: at each dev evaluation (of ``--dev``, or the ``--dev-split`` part of train) choose the
    threshold with the best dev F1; the best checkpoint keeps it for the test score, predict, evaluate and serve."""
    unused_data_settings: ClassVar[dict] = {
        "label_names": "entity types are named in the data",
        **dict.fromkeys(
            ("text_column", "text_pair_column", "label_column"),
            "NER files are read by --format (conll, cluener, spans or text; see data/README.md), not by column",
        ),
        "window_pooling": "each token is tagged from the one window where it has most context",
        **dict.fromkeys(("header", "sheet"), "NER files are JSON or CoNLL, not tables"),
    }
    """Data settings NER never reads: no flag, and a recipe that sets one is an error."""

    def __new__(cls, *args, **kwargs):
        if cls is NER and kwargs.get("nested"):  # named as a string, as model classes are: no import cycle
            cls = resolve_task("ernie_ft.ner.nested:NestedNER")
        return super().__new__(cls)

    def __post_init__(self):
        check_choice(self.format, FORMATS, "--format")
        check_choice(self.overlapping, OVERLAPPING, "--overlapping")
        if not self.nested and (self.threshold is not None or self.tune_thresholds):
            flag = "--threshold" if self.threshold is not None else "--tune-thresholds"
            raise UserError(
                f"{flag} is for the nested span model (--nested); the tagger decides each token by its most "
                "probable tag"
            )
        self._model = None

    @property
    def model_class(self):
        return "ernie_ft.models.crf:ErnieCrfForTokenClassification" if self.crf else None

    def bind(self, model) -> None:
        self._model = model

    def types(self, labels: list[str]) -> list[str]:
        """The entity types of the model's labels (here its BIO tags)."""
        return entity_types(labels)

    def read(self, path, data, flag, labelled=True):
        fmt = self.format if labelled else "auto"
        return read_ner(path, flag, fmt, labelled, self.overlapping, data.predictions_as_labels)

    def read_records(self, records, data, flag):
        return read_ner_records(records, flag, labelled=False, overlapping=self.overlapping)

    def held_out(self, train, data):
        """``--dev-split`` of train as dev, never taking an entity type's last training example."""
        return split_dev(train, data.dev_split, lambda e: {t for *_, t in e.entities})

    def fit_labels(self, train):
        types = sorted({t for e in train for *_, t in e.entities})
        if not types:
            raise UserError(
                f"{train[0].source}: the training file has no entities; label some entities "
                "(see data/README.md for the formats)"
            )
        warn_rare_labels(Counter(t for e in train for *_, t in e.entities), train[0].source, "entity type")
        return ["O"] + [f"{prefix}-{t}" for t in types for prefix in "BI"]

    def check_labels(self, examples, labels, data, flag):
        check_known_labels(
            examples,
            lambda e: [t for *_, t in e.entities],
            self.types(labels),
            data.allow_new_labels,
            flag,
            "entity type",
        )

    def texts(self, examples):
        return [e.text for e in examples]

    def featurize(self, examples, encodings, pipeline, labels, data):
        index = {tag: i for i, tag in enumerate(labels)}
        continuation = continuation_ids(pipeline)
        features, inexact = [], []
        for doc, (example, encoding) in enumerate(zip(examples, encodings)):
            units = token_units(encoding, continuation)
            tags = unit_tags(example.entities, units, len(example.text))
            token_labels = [-100] * len(encoding.ids)
            for (token, _, _), tag in zip(units, tags):
                token_labels[token] = index.get(tag, 0)  # a type train never had (--allow-new-labels): O
            exact = set(units_to_spans(tags, units)[0])
            inexact += [(example, e) for e in example.entities if e not in exact and f"B-{e[2]}" in index]
            for start, end, ids, types in token_windows(encoding.ids, pipeline, data):
                features.append(
                    {
                        "input_ids": ids,
                        "token_type_ids": types,
                        "doc": doc,
                        "_window": (start, end),
                        "labels": [-100, *token_labels[start:end], -100],
                        "_units": units,
                    }
                )
        note_inexact(inexact, "the tags cannot hold them exactly; they are tagged on the tokens they start in")
        return features

    def loss(self, logits, batch):
        import paddle
        import paddle.nn.functional as F

        if self.crf:
            from ernie_ft.models.crf import crf_loss

            return crf_loss(self._model.crf_transitions, logits, batch["labels"])
        labels = batch["labels"]
        total = F.cross_entropy(logits, labels.unsqueeze(-1), ignore_index=-100, reduction="sum")
        return total / paddle.clip((labels != -100).astype("float32").sum(), min=1.0)

    def decode(self, logits, features, examples, labels) -> tuple[list[list[tuple]], int]:
        """Predicted (start, end, type, score) per example, and how many tags the decode repaired.

        The score is the mean softmax probability of the entity's tags (for the CRF, of its emission scores).
        """
        docs = stitch(logits, features, len(examples))
        units = {f["doc"]: f["_units"] for f in features}
        emissions = [docs[d][[u[0] for u in units[d]]] for d in range(len(examples))]
        from ernie_ft.models.viterbi import log_softmax, viterbi

        log_probs = [log_softmax(e) for e in emissions]
        if self.crf:
            paths = viterbi(emissions, np.asarray(self._model.crf_transitions), labels)
        elif self.constrained:  # no learned transitions: the most probable of the valid sequences
            paths = viterbi(log_probs, np.zeros((len(labels), len(labels)), dtype="float32"), labels)
        else:
            paths = [e.argmax(axis=1) for e in emissions]
        predictions, repaired = [], 0
        for d, (scores, path) in enumerate(zip(log_probs, paths)):
            chosen = np.exp(scores[np.arange(len(path)), path])
            spans, invalid = tags_to_spans([parse_tag(labels[i], "tag") for i in path], "bio")
            repaired += len(invalid)
            predictions.append(
                [(units[d][s][1], units[d][e - 1][2], kind, float(chosen[s:e].mean())) for s, e, kind in spans]
            )
        return predictions, repaired

    def evaluate(self, logits, features, examples, labels, data):
        predicted, _ = self.decode(logits, features, examples, labels)
        return entity_metrics(
            [e.entities for e in examples], [[p[:3] for p in ps] for ps in predicted], self.types(labels)
        )

    def predict(self, logits, features, examples, labels, data):
        predicted, _ = self.decode(logits, features, examples, labels)
        return [
            {
                "text": e.text,
                "entities": [
                    {"start": s, "end": t, "type": k, "text": e.text[s:t], "score": round(score, 4)}
                    for s, t, k, score in spans
                ],
            }
            for e, spans in zip(examples, predicted)
        ]

    def report(self, logits, features, examples, labels, data, out_dir: str) -> str:
        """The per-type table; every missed, spurious, wrong-type and wrong-boundary entity in errors.txt."""
        tally = self.tally(labels, data, out_dir)
        tally.add(logits, features, examples)
        return tally.report(out_dir)

    def tally(self, labels, data, out_dir):
        """Entity counts and errors.txt kept chunk by chunk (``evaluation.tallies.EntityTally``)."""
        from ernie_ft.evaluation.tallies import EntityTally

        decode = lambda logits, features, examples: self.decode(logits, features, examples, labels)  # noqa: E731
        return EntityTally(decode, self.types(labels), out_dir)
