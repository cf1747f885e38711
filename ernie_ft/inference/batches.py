"""The batches a ``Predictor`` takes besides a list of records, as Ray Data's ``map_batches`` and Spark's pandas UDFs
hand them: a pandas DataFrame, a pyarrow Table, or a dict of columns (column name -> list or numpy array, Ray's
"numpy" batch format). Each row is a record; the answer is the same kind of batch, its columns kept and each field of
the answers that is not one of them (``label``, ``probs``, ``entities`` ...) added as a column, in row order."""

from __future__ import annotations

import sys
from typing import Any, Optional

from ernie_ft.errors import UserError


def kind_of(batch: Any) -> Optional[str]:
    """'pandas', 'arrow' or 'columns' for a batch, None for anything else (a list of records or texts, a text)."""
    pandas, arrow = sys.modules.get("pandas"), sys.modules.get("pyarrow")  # a batch of theirs means they are loaded
    if pandas is not None and isinstance(batch, pandas.DataFrame):
        return "pandas"
    if arrow is not None and isinstance(batch, arrow.Table):
        return "arrow"
    return "columns" if isinstance(batch, dict) else None


def to_records(batch: Any, kind: str) -> list[dict]:
    """The rows of ``batch`` (of ``kind``, see ``kind_of``) as records, column name -> Python value."""
    if kind == "pandas":
        return batch.to_dict("records")
    if kind == "arrow":
        return batch.to_pylist()
    columns = {name: _values(name, column) for name, column in batch.items()}
    lengths = {len(column) for column in columns.values()}
    if len(lengths) > 1:
        sizes = ", ".join(f"{name}: {len(column)}" for name, column in columns.items())
        raise UserError(f"inputs: a dict of columns needs columns of one length; found {sizes}")
    rows = lengths.pop() if lengths else 0
    return [{name: column[i] for name, column in columns.items()} for i in range(rows)]


def _values(name: str, column: Any) -> list:
    if isinstance(column, (str, bytes)) or not hasattr(column, "__len__"):
        raise UserError(
            f'inputs["{name}"]: a dict of columns maps each name to a list or array of values, found '
            f"{type(column).__name__}; a single record is given as a list of one: [{{...}}]"
        )
    return column.tolist() if hasattr(column, "tolist") else list(column)


def with_answers(batch: Any, kind: str, answers: list[dict]) -> Any:
    """``batch`` with each answer field that is not one of its columns added as a column (a new object)."""
    names = list(batch.columns) if kind == "pandas" else batch.column_names if kind == "arrow" else list(batch)
    added = {}
    for answer in answers:
        for field in answer:
            if field not in names:
                added.setdefault(field, None)
    columns = {field: [answer.get(field) for answer in answers] for field in added}
    if kind == "pandas":
        import pandas

        out = batch.copy()
        for field, values in columns.items():
            out[field] = pandas.Series(values, index=batch.index, dtype=object if _nested(values) else None)
        return out
    if kind == "arrow":
        import pyarrow

        for field, values in columns.items():
            batch = batch.append_column(field, pyarrow.array(values))
        return batch
    import numpy as np

    arrays = any(isinstance(column, np.ndarray) for column in batch.values())  # Ray's numpy format: arrays out
    return {**batch, **{field: _array(values) if arrays else values for field, values in columns.items()}}


def _nested(values: list) -> bool:
    return any(isinstance(value, (dict, list, tuple)) for value in values)


def _array(values: list):
    """A numpy array of ``values``: an object array of the dicts or lists themselves where they are nested."""
    import numpy as np

    if not _nested(values):
        return np.asarray(values)
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):  # one by one: numpy would make equal-length lists a second dimension
        array[i] = value
    return array
