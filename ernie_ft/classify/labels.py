"""Where classification labels come from, for several labels per text and label paths.

Labels may be a JSON list (``"label": ["a", "b"]``), one column joined by ``--label-separator``, or one
0/1 column per label (``--label-columns``, names or a pattern such as ``category_*``). With
``--hierarchy-separator`` each label is a path (``组织关系-裁员``) and every prefix of it is a node.
Class weights come from the training labels (``balanced``) or from a file of ``label<TAB>weight`` lines.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os

import numpy as np

from ernie_ft.data import tables
from ernie_ft.data.sources import column_key, read_records
from ernie_ft.errors import UserError

TRUE, FALSE = ("1", "1.0", "true"), ("0", "0.0", "false", "")


def as_labels(value, separator: str | None) -> tuple[str, ...]:
    """One record's labels: a reader's label (None, a string or a JSON list's tuple), a string split at
    ``separator``; empty items dropped, order kept, repeats once."""
    if value is None:
        return ()
    items = value if isinstance(value, tuple) else (value,)
    if separator:
        items = [part for item in items for part in item.split(separator)]
    return tuple(dict.fromkeys(item.strip() for item in items if item.strip()))


def single_label(example, flag: str):
    """``example`` with one label: a JSON list of exactly one label is that label; a longer one is an error
    (without --multi-label each combination would silently become a class of its own)."""
    if not isinstance(example.label, tuple):
        return example
    if len(example.label) == 1:
        return dataclasses.replace(example, label=example.label[0])
    shown = ", ".join(example.label[:4]) + (", ..." if len(example.label) > 4 else "")
    raise UserError(
        f"{flag}: {example.source}:{example.line}: the label is a list of {len(example.label)} labels ({shown}); "
        "pass --multi-label to learn several labels per text"
    )


def column_names(spec: str, columns: list[str], where: str) -> list[str]:
    """The columns ``--label-columns`` names: COL,COL,... (each must exist, matched as ``sources.column_key``
    matches) or patterns such as 'category_*'."""
    chosen, by_key = [], {column_key(c): c for c in columns}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        if any(ch in item for ch in "*?["):
            matched = [c for c in columns if fnmatch.fnmatchcase(c, item)]
            if not matched:
                raise UserError(
                    f"--label-columns {spec}: the pattern {item!r} matches no column of {where} "
                    f"(columns: {', '.join(columns)})"
                )
        elif column_key(item) not in by_key:
            raise UserError(
                f"--label-columns {spec}: column {item!r} not found in {where} (columns: {', '.join(columns)})"
            )
        else:
            matched = [by_key[column_key(item)]]
        chosen += [c for c in matched if c not in chosen]
    if not chosen:
        raise UserError(f"--label-columns {spec!r}: name at least one column, e.g. --label-columns 'category_*'")
    return chosen


def read_label_columns(path: str, flag: str, spec: str, settings: dict) -> tuple[list[str], dict[int, tuple[str, ...]]]:
    """(the columns ``spec`` names, {line: the names of the columns holding 1}) for a file with one 0/1 column per
    label, read with the ``settings`` ``read_examples`` takes (its columns, ``header``, ``sheet``)."""
    names, rows = _label_columns(path, flag, spec, settings)
    labels = {}
    for line, record in rows:
        on = []
        for name in names:
            value = record.get(name)
            text = str(value).strip().lower() if value is not None else ""
            if isinstance(value, (list, dict)) or text not in TRUE + FALSE:
                raise UserError(
                    f'{flag}: {path}:{line}: column "{name}" holds {str(value)[:20]!r}; a label column holds 1 '
                    "(the text has this label) or 0"
                )
            if text in TRUE:
                on.append(name)
        labels[line] = tuple(on)
    return names, labels


def check_split_columns(spec: str, names: list[str], where: str, train: str, settings: dict, allow_new: bool) -> None:
    """Raise UserError when a labelled split's label columns (``names``, in ``where``) are not the training file's
    (``train``): a label of the model without its column would be scored as never occurring in the split, and a
    column train lacks as a label the model never learned (allowed with ``allow_new``, as a new label is)."""
    reference, _ = _label_columns(train, "--train", spec, settings)
    missing, extra = [c for c in reference if c not in names], [c for c in names if c not in reference]
    if missing:
        raise UserError(
            f"--label-columns {spec}: {where} has no column {', '.join(missing)}, which --train: {train} has; each "
            "label the model learns needs its column in every labelled file, or the file is scored as if no text had "
            "that label: add the column (1 where a text has the label, else 0)"
        )
    if extra and not allow_new:
        raise UserError(
            f"--label-columns {spec}: {where} has the column {', '.join(extra)}, which --train: {train} lacks, so the "
            "model never learns that label; remove the column or rename it as in --train, or pass --allow-new-labels "
            "to score it as a label the model always misses"
        )


def _label_columns(path: str, flag: str, spec: str, settings: dict) -> tuple[list[str], list]:
    """(the columns ``spec`` names in ``path``, its records); on an Excel workbook whose sheet lacks them, the
    error names its sheets and ``--sheet``."""
    named = (settings.get("text_column"), settings.get("pair_column"), *spec.split(","))
    header_names = [c.strip() for c in named if c and c.strip() and not c.isdigit() and not set(c) & set("*?[")]
    where = f"{flag}: {path}"

    def read(sheet):
        columns, rows = read_records(path, flag, header_names=header_names, header=settings.get("header"), sheet=sheet)
        return column_names(spec, columns, where), rows

    try:
        return read(settings.get("sheet"))
    except UserError as e:
        raise tables.with_sheets(e, path, settings.get("sheet"), read) from None


def parent(node: str, separator: str) -> str | None:
    """The node one level up (None for a top-level node)."""
    head, sep, _ = node.rpartition(separator)
    return head if sep else None


def path_nodes(labels: tuple[str, ...], separator: str | None) -> tuple[str, ...]:
    """Every node of the label paths: each label's prefixes at ``separator`` (parents first), then the label."""
    if not separator:
        return labels
    nodes = []
    for label in labels:
        parts = label.split(separator)
        nodes += [separator.join(parts[: i + 1]) for i in range(len(parts))]
    return tuple(dict.fromkeys(nodes))


def depths(labels: list[str], separator: str | None) -> list[int]:
    """Each node's level, from 1 (top level); all 1 without a hierarchy."""
    return [label.count(separator) + 1 if separator else 1 for label in labels]


def read_weights_file(path: str, labels: list[str]) -> np.ndarray:
    """Weights per label from ``label<TAB>weight`` lines (blank lines and # comments skipped); labels the file
    leaves out weigh 1. An unknown label or a bad weight is an error naming the line."""
    if not os.path.isfile(path):
        raise UserError(f"--class-weights {path}: give 'balanced' or a file of label<TAB>weight lines (not found)")
    index = {label: i for i, label in enumerate(labels)}
    weights = np.ones(len(labels), dtype=np.float32)
    with open(path, encoding="utf-8-sig") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            label, sep, value = line.rstrip("\n").rpartition("\t")
            label = label.strip()
            try:
                weight = float(value) if sep else float("nan")
            except ValueError:
                weight = float("nan")
            if not weight >= 0 or not np.isfinite(weight):
                raise UserError(f"--class-weights: {path}:{n}: expected label<TAB>weight (a number >= 0), got {line!r}")
            if label not in index:
                shown = ", ".join(labels[:20]) + (", ..." if len(labels) > 20 else "")
                raise UserError(
                    f"--class-weights: {path}:{n}: the label {label!r} is not a training label ({shown}); "
                    "fix the name or delete the line"
                )
            weights[index[label]] = weight
    return weights


def balanced_weights(targets: np.ndarray, count: int, multi: bool) -> np.ndarray:
    """Weights of ``count`` labels from the training targets: single-label (``targets`` the label index per text),
    n / (k * count) per label as scikit-learn's 'balanced'; multi-label (``targets`` texts x labels of 0/1), each
    label's positive weight negatives / positives."""
    if multi:
        positives = targets.sum(axis=0)
        return ((len(targets) - positives) / np.maximum(positives, 1)).astype(np.float32)
    from sklearn.utils.class_weight import compute_class_weight

    present = np.unique(targets)
    weights = np.ones(count, dtype=np.float32)
    weights[present] = compute_class_weight("balanced", classes=present, y=targets)
    return weights
