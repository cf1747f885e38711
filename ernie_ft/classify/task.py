"""Text classification (single texts or pairs): ``python -m ernie_ft.classify``.

One label per text by default (softmax); with ``--multi-label`` several labels or none (a sigmoid per label),
and with ``--hierarchy-separator`` label paths whose every prefix is a node (``multilabel.py``).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from ernie_ft import thresholds as thresholds_module
from ernie_ft.classify import labels as label_sources
from ernie_ft.classify import multilabel
from ernie_ft.config import DataConfig
from ernie_ft.data.readers import read_examples, record_examples
from ernie_ft.data.windows import pair_texts, pool_windows, text_windows
from ernie_ft.dev_split import split_dev
from ernie_ft.errors import UserError
from ernie_ft.label_set import check_known_labels, label_order, warn_rare_labels
from ernie_ft.task import TaskHooks


def read_labelled(path: str, data: DataConfig, flag: str, labelled: bool = True) -> list:
    """Examples (text, text_pair, label, line, source) from TSV, CSV, JSONL or .txt, coded labels named
    as --label-names says; a JSON list of one label is that label, a longer one an error (--multi-label)."""
    columns = data_columns(data)
    examples = read_examples(
        path, **columns, require_label=labelled, flag=flag, predictions_as_labels=data.predictions_as_labels
    )
    examples = [label_sources.single_label(e, flag) for e in examples]
    return name_labels(examples, data.label_name_map(), flag)


def data_columns(data: DataConfig) -> dict:
    """The columns ``data`` names and how its tables are read (``header``, ``sheet``), as ``read_examples`` and
    ``record_examples`` take them."""
    columns = {"text_column": data.text_column, "pair_column": data.text_pair_column, "label_column": data.label_column}
    return {**columns, "header": data.header, "sheet": data.sheet}


def name_labels(examples: list, names: dict[str, str], flag: str) -> list:
    """``examples`` with each coded label replaced by its name; a label that is already a name stays. A label
    that is neither is an error naming the file and line (a mapping that misses a code is a typo to fix)."""
    if not names:
        return examples
    known = set(names.values())
    for e in examples:
        if e.label is not None and e.label not in known and e.label not in names:
            raise UserError(
                f"{flag}: {e.source}:{e.line}: the label {e.label!r} has no name in --label-names "
                f"({', '.join(f'{k}={v}' for k, v in names.items())}); add {e.label}=NAME"
            )
    return [dataclasses.replace(e, label=names.get(e.label, e.label)) for e in examples]


@dataclass
class Classification(TaskHooks):
    """One label per text or text pair (or, with ``multi_label``, several or none); long texts are windowed
    and their logits pooled."""

    name: str = "classify"
    head: str = "sequence"
    metric: str = "accuracy"
    multi_label: bool = False
    """Several labels per text, or none: a sigmoid per label (binary cross-entropy), labels from a JSON list,
    ``label_separator`` or ``label_columns``; the default dev metric becomes micro_f1."""
    label_separator: Optional[str] = None
    """With ``multi_label``: the labels of a text are in one column joined by this, e.g. '|' or ','."""
    label_columns: Optional[str] = None
    """With ``multi_label``: one 0/1 column per label, named COL,COL,... or by a pattern such as 'category_*'; the
    label is the column's name."""
    hierarchy_separator: Optional[str] = None
    """Labels are paths (组织关系-裁员 with '-'): every prefix is a node with its own sigmoid, and a node is never
    predicted without its parent; per-level metrics. Without ``multi_label`` one path per text."""
    threshold: Optional[float] = None
    """With ``multi_label``: the probability (0 to 1) at which a label is predicted; default 0.5."""
    tune_thresholds: bool = False
    """With ``multi_label``: at each dev evaluation (of ``--dev``, or the ``--dev-split`` part of train) choose per
    label the probability that maximises its dev F1; the best checkpoint keeps them (``thresholds``) for the test
    score, predict, evaluate and serve."""
    thresholds: Optional[str] = None
    """Per-label thresholds as JSON {"label": 0.3, ...} (labels left out use ``threshold``); written into the
    checkpoint by ``tune_thresholds``."""
    top_k: int = 0
    """With ``multi_label``: predict at most K labels per text (paths with a hierarchy), the most probable of
    those over the threshold; 0: no limit."""
    class_weights: Optional[str] = None
    """Weigh labels against imbalance: 'balanced' (inverse frequency; with ``multi_label`` each label's positive
    weight, negatives / positives) or a file of label<TAB>weight lines."""
    input_fields: ClassVar[tuple] = (("text",), ("text_pair",))
    reads_records_apart: ClassVar[bool] = True
    takes_class_weights: ClassVar[bool] = True
    distillation: ClassVar[str] = "ernie_ft.distill.task:Distillation"  # named, not imported: distill builds on this

    @property
    def output_kind(self) -> str:
        return "sigmoid" if self.sets else "softmax"

    _codes: dict = dataclasses.field(default_factory=dict, init=False, repr=False)
    """Name -> code of --label-names (set by ``read``): named labels keep their codes' order."""
    _columns: dict = dataclasses.field(default_factory=dict, init=False, repr=False)
    """File -> the labels of the columns ``label_columns`` found in it (named by --label-names, with their path nodes;
    set by ``read``): training learns each, even one that holds no 1, and ``check_labels`` checks them."""
    _weights: Optional[np.ndarray] = dataclasses.field(default=None, init=False, repr=False)
    """The class weights per label (set by ``fit_labels`` with ``class_weights``)."""
    _prior: Optional[np.ndarray] = dataclasses.field(default=None, init=False, repr=False)
    """Each label's share of the training texts (set by ``fit_labels`` for label sets): ``bind`` starts the output
    biases of a new head at its log-odds."""

    def __post_init__(self):
        given = {
            "--label-separator": self.label_separator,
            "--label-columns": self.label_columns,
            "--top-k": self.top_k,
            "--tune-thresholds": self.tune_thresholds,
            "--threshold": self.threshold is not None,
            "--thresholds": self.thresholds,
        }
        flag = next((flag for flag, value in given.items() if value), None)
        if flag and not self.multi_label:
            raise UserError(f"{flag} is for several labels per text: add --multi-label")
        self.threshold = thresholds_module.check(self.threshold)
        if self.top_k < 0:
            raise UserError("--top-k must be 0 (no limit) or more")
        if self.label_columns and self.label_separator:
            raise UserError("--label-columns and --label-separator are two sources of labels: give one")
        if self.multi_label and self.metric == "accuracy":
            self.metric = "micro_f1"
        self.threshold_map()

    @classmethod
    def recorded_options(cls, options, run=None):
        """A checkpoint of ernie_ft before 0.4 recorded ``threshold: 0.5`` for every classifier, single-label too."""
        if not options.get("multi_label") and options.get("threshold") == thresholds_module.DEFAULT:
            options = {k: v for k, v in options.items() if k != "threshold"}
        return options

    @property
    def decides_by_threshold(self) -> bool:
        return self.multi_label

    @property
    def tunes_thresholds(self) -> bool:
        return self.tune_thresholds

    @property
    def sets(self) -> bool:
        """Whether labels are sets of nodes scored by a sigmoid each (multi-label or a hierarchy)."""
        return self.multi_label or bool(self.hierarchy_separator)

    def threshold_map(self) -> dict:
        """``thresholds`` as {label: probability} ({} when not given)."""
        if not self.thresholds:
            return {}
        try:
            value = json.loads(self.thresholds)
            if isinstance(value, dict) and all(0 < float(v) < 1 for v in value.values()):
                return {str(k): float(v) for k, v in value.items()}
        except (ValueError, TypeError):
            pass
        raise UserError(
            f'--thresholds {self.thresholds}: give JSON of probabilities between 0 and 1, such as {{"体育": 0.3, '
            '"娱乐": 0.6}'
        )

    def read(self, path, data, flag, labelled=True):
        self._codes = {name: code for code, name in data.label_name_map().items()}
        if self.sets:
            return multilabel.read_sets(self, path, data, flag, data_columns(data), labelled)
        return read_labelled(path, data, flag, labelled)

    def read_records(self, records, data, flag):
        examples = record_examples(records, **data_columns(data), require_label=False, flag=flag)
        return [dataclasses.replace(e, label=() if self.sets else None) for e in examples]  # inputs to predict

    def held_out(self, train, data):
        """``--dev-split`` of train as dev, never taking a label's last training example."""
        return split_dev(train, data.dev_split, lambda e: e.label if isinstance(e.label, tuple) else (e.label,))

    def fit_labels(self, train):
        nodes = [node for e in train for node in e.label] if self.sets else [e.label for e in train]
        counts = Counter(nodes)
        if self.sets:
            counts.update(dict.fromkeys(self._columns.get(getattr(train[0], "source", None), ()) if train else (), 0))
            labels = label_order(list(counts))
            self._check_paths(train, labels)
        else:
            labels = self._single_labels(train)
        warn_rare_labels(counts, getattr(train[0], "source", "--train") if train else "--train")
        if self.sets:
            self._prior = multilabel.targets(train, labels).mean(axis=0)
        if self.class_weights:
            self._weights = self._class_weights(train, labels)
        return labels

    def _single_labels(self, train) -> list:
        labels = label_order([e.label for e in train])
        if self._codes and all(label in self._codes for label in labels):
            order = label_order(list(self._codes.values()))
            labels = sorted(labels, key=lambda name: order.index(self._codes[name]))
        if len(labels) < 2:
            raise UserError(
                f"{train[0].source}: every training example has the label {labels[0]!r}; "
                "a classifier needs at least two labels"
            )
        return labels

    def _check_paths(self, train: list, labels: list) -> None:
        """Some label is needed; a single-label hierarchy's paths end at leaves (a label that is also another
        label's parent could never be predicted)."""
        sep = self.hierarchy_separator
        if not labels:
            raise UserError(f"{train[0].source}: no training text has a label")
        if not sep or self.multi_label:
            return
        inner = {label_sources.parent(label, sep) for label in labels}
        for e in train:
            if e.label and e.label[-1] in inner:
                raise UserError(
                    f"{e.source}:{e.line}: the label {e.label[-1]!r} is also the parent of other labels; one path "
                    "per text ends at a leaf (or pass --multi-label)"
                )

    def _class_weights(self, train, labels) -> np.ndarray:
        if self.class_weights != "balanced":
            return label_sources.read_weights_file(self.class_weights, labels)
        if self.sets:
            return label_sources.balanced_weights(multilabel.targets(train, labels), len(labels), True)
        index = {label: i for i, label in enumerate(labels)}
        return label_sources.balanced_weights(np.array([index[e.label] for e in train]), len(labels), False)

    def bind(self, model) -> None:
        """In training with label sets, a new head's output biases start at each label's log-odds in train: a
        sigmoid head from zero spends its first hundreds of steps learning how rare labels are, and a model
        from scratch its representations collapse meanwhile (a tiny model learned nothing in 100 steps on 58
        texts that it memorises with the prior)."""
        bias = getattr(getattr(model, "classifier", None), "bias", None)
        if self._prior is None or bias is None or bias.shape != list(self._prior.shape) or bias.numpy().any():
            return
        share = np.clip(self._prior, 1e-4, 1 - 1e-4)
        bias.set_value(np.log(share / (1 - share)).astype(bias.numpy().dtype))

    def check_labels(self, examples, labels, data, flag):
        def labels_of(e):
            return e.label if self.sets else (() if e.label is None else (e.label,))

        check_known_labels(examples, labels_of, labels, data.allow_new_labels, flag)
        if self.label_columns and examples and examples[0].source in self._columns:
            self._check_columns(self._columns[examples[0].source], labels, flag, examples[0].source)

    def _check_columns(self, columns: list, labels: list, flag: str, path: str) -> None:
        """A labelled file read by ``label_columns`` holds a column for every label of the model (``evaluate`` of a
        file without one would score that label as never occurring)."""
        missing = [label for label in labels if label not in set(columns)]
        if missing:
            raise UserError(
                f"--label-columns {self.label_columns}: {flag}: {path} has no column for the model's label"
                f"{'s' * (len(missing) > 1)} {', '.join(missing[:8])}; each label needs its column in every labelled "
                "file, or the file is scored as if no text had that label: add the column (1 where a text has the "
                "label, else 0)"
            )

    def texts(self, examples):
        return pair_texts(examples)

    def featurize(self, examples, encodings, pipeline, labels, data):
        features = text_windows(examples, encodings, pipeline, data)
        if self.sets:
            rows = multilabel.targets(examples, labels)
            for f in features:
                f["labels"] = rows[f["doc"]]
            return features
        index = {label: i for i, label in enumerate(labels)}
        for f in features:
            f["labels"] = index.get(examples[f["doc"]].label, -1)
        return features

    def loss(self, logits, batch):
        import paddle
        import paddle.nn.functional as F

        weights = None if self._weights is None else paddle.to_tensor(self._weights)
        if self.sets:
            return F.binary_cross_entropy_with_logits(logits, batch["labels"], pos_weight=weights)
        return F.cross_entropy(logits, batch["labels"], weight=weights)

    def probabilities(self, logits, features, examples, data) -> np.ndarray:
        pooled = pool_windows(logits, np.array([f["doc"] for f in features]), len(examples), data.window_pooling)
        if self.sets:
            from ernie_ft.classify.decoding import sigmoid

            return sigmoid(pooled)
        pooled = pooled - pooled.max(axis=1, keepdims=True)
        exp = np.exp(pooled)
        return exp / exp.sum(axis=1, keepdims=True)

    def decide(self, probs: np.ndarray, labels: list, thresholds: Optional[np.ndarray] = None) -> np.ndarray:
        """Predicted label sets (texts x labels, bool) from sigmoid probabilities: one path per text for a
        single-label hierarchy, else the thresholds (given, ``thresholds``, ``threshold``) and ``top_k``."""
        from ernie_ft.classify import decoding

        up = decoding.parents(labels, self.hierarchy_separator)
        if not self.multi_label:
            return decoding.decode_paths(probs, up)
        if thresholds is None:
            given, default = self.threshold_map(), thresholds_module.probability(self.threshold)
            thresholds = np.array([given.get(label, default) for label in labels], dtype=np.float32)
        return decoding.decode(probs, thresholds, up, self.top_k)

    def tune(self, logits, features, examples, labels, data):
        if not (self.tune_thresholds and self.multi_label and examples):
            return {}
        probs = self.probabilities(logits, features, examples, data)
        default = thresholds_module.probability(self.threshold)
        from ernie_ft.classify import decoding

        tuned = decoding.tune_thresholds(probs, multilabel.targets(examples, labels) > 0, default)
        chosen = {label: round(float(t), 2) for label, t in zip(labels, tuned)}
        self.thresholds = json.dumps(chosen, ensure_ascii=False)
        return {"thresholds": chosen}

    def threshold_of(self, output):
        if not self.decides_by_threshold:
            return None
        return self.threshold_map().get(output, thresholds_module.probability(self.threshold))

    def use_threshold(self, threshold):
        if not self.decides_by_threshold:
            super().use_threshold(threshold)
        self.threshold, self.thresholds = thresholds_module.check(threshold), None

    def learned_options(self, dev):
        if not self.tune_thresholds or not dev or "thresholds" not in dev:
            return {}
        self.thresholds = json.dumps(dev["thresholds"], ensure_ascii=False)
        return {"thresholds": self.thresholds}

    def evaluate(self, logits, features, examples, labels, data):
        from ernie_ft.evaluation.classification import classification_metrics

        if self.sets:
            return multilabel.evaluate_sets(self, logits, features, examples, labels, data)
        predicted = self.single_labels(logits, features, examples, labels, data)
        return classification_metrics([e.label for e in examples], predicted, labels)

    def predict(self, logits, features, examples, labels, data):
        if self.sets:
            return multilabel.predict_sets(self, logits, features, examples, labels, data)
        probs = self.probabilities(logits, features, examples, data)
        records = []
        for example, p in zip(examples, probs):
            record = {"text": example.text}
            if example.text_pair is not None:
                record["text_pair"] = example.text_pair
            record["label"] = labels[int(p.argmax())]
            record["probs"] = {label: round(float(v), 6) for label, v in zip(labels, p)}
            records.append(record)
        return records

    def report(self, logits, features, examples, labels, data, out_dir: str) -> str:
        """Per-class table as text, and a confusion-matrix PNG in ``out_dir`` (label sets: a per-label
        precision/recall/F1 PNG)."""
        from ernie_ft.evaluation.classification import classification_report

        if self.sets:
            return multilabel.report_sets(self, logits, features, examples, labels, data, out_dir)
        predicted = self.single_labels(logits, features, examples, labels, data)
        return classification_report([e.label for e in examples], predicted, labels, out_dir)

    def single_labels(self, logits, features, examples, labels, data) -> list[str]:
        """The label of each example with one label per text: the argmax of its pooled probabilities."""
        return [labels[i] for i in self.probabilities(logits, features, examples, data).argmax(axis=1)]

    def tally(self, labels, data, out_dir):
        """The gold and predicted labels kept chunk by chunk: one label per text, or each text's label set."""
        from ernie_ft.evaluation.tallies import ClassTally, SetTally

        if self.sets:
            return SetTally(
                lambda logits, feats, examples: multilabel.decided(self, logits, feats, examples, labels, data),
                lambda gold, rows: multilabel.set_metrics(self, gold, rows, labels),
                multilabel.set_report,
            )
        return ClassTally(
            lambda logits, feats, examples: self.single_labels(logits, feats, examples, labels, data), labels
        )
