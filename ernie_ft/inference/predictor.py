"""``ernie_ft.Predictor``: a checkpoint that answers records in memory from Python, as ``predict`` answers a file."""

from __future__ import annotations

import copy
import json
from typing import Optional

from ernie_ft.config import DataConfig
from ernie_ft.errors import UserError
from ernie_ft.inference.predict import load_for_inference, resolve_engine
from ernie_ft.models.modeling import compute_logits, task_batching
from ernie_ft.training import checkpoint


class Predictor:
    """A loaded checkpoint that answers input records in memory, as ``predict`` answers a file of them::

        from ernie_ft import Predictor

        classify = Predictor("runs/sentiment")
        classify([{"text": "房间很干净"}, {"text": "太吵了"}])  # [{"text": ..., "label": ..., "probs": ...}, ...]
        classify(["房间很干净", "太吵了"])  # the same: texts, as the HTTP API takes them
        classify("房间很干净")  # a list of one prediction
        classify(pandas.DataFrame({"text": [...]}))  # the frame with the answer columns (label, probs) added

    Inputs are records of the task's fields (``input_fields``), or texts where the task has one required field
    (``text`` for classification, NER and relation extraction; ``as_records``); or a batch, as Ray Data's
    ``map_batches`` and Spark's pandas UDFs hand one: a pandas DataFrame, a pyarrow Table or a dict of columns, whose
    rows are the records, answered as the same kind with the answer's other fields as columns (``inference.batches``).
    A call is three steps that a server may run apart: ``prepare`` (read the records through the task's
    ``read_records`` and featurize them, any thread), ``logits`` (the model) and ``answer``. A bad field raises
    UserError naming it (``inputs[2].text``).

    A Predictor pickles without its model: the copy loads it when first used, once per process (copies of one
    Predictor share it), so one can be handed to worker processes (Ray, Spark, ``multiprocessing``). ``threads``:
    the engine's CPU threads (0: the cores this process may use), for several Predictors on one machine.
    """

    def __init__(
        self,
        model_dir: str,
        engine: str = "auto",
        device: str = "auto",
        trust_pickle: bool = False,
        task: Optional[str] = None,
        batch_size: int = 64,
        threshold: Optional[float] = None,
        threads: int = 0,
    ):
        source = checkpoint.checkpoint_dir(model_dir)  # the directory's one reading
        self.model_dir, self.engine, self.batch_size = model_dir, resolve_engine(source, engine), batch_size
        self._source, self._settings = source, (device, trust_pickle, task, threshold, threads)
        self._loaded = load_for_inference(source, device, {}, self.engine, trust_pickle, task, threshold, threads)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_loaded": None}  # the model is loaded again where it is used

    def _load(self) -> tuple:
        if self._loaded is None:
            key = (self._source.path, self.engine, self._settings)
            if key not in _LOADED:
                device, trust_pickle, task, threshold, threads = self._settings
                _LOADED[key] = load_for_inference(self._source, device, {}, self.engine, trust_pickle, task, threshold,
                                                  threads)  # fmt: skip
            self._loaded = _LOADED[key]
        return self._loaded

    @property
    def loaded(self):
        """The loaded checkpoint (``checkpoint.Loaded``)."""
        return self._load()[0]

    @property
    def data(self) -> DataConfig:
        return self._load()[1]

    @property
    def task(self):
        return self.loaded.task

    @property
    def labels(self) -> list:
        return self.loaded.labels

    def __call__(self, records):
        from ernie_ft.inference import batches

        kind = batches.kind_of(records)
        if kind is None:
            return self._answers(records)
        rows = batches.to_records(records, kind)
        return batches.with_answers(records, kind, self._answers(rows) if rows else [])

    def _answers(self, records) -> list[dict]:
        # Not self(...): Ray Data subclasses a callable class, its __call__ handing each call to the actor's one
        # thread and waiting for it; a call from inside that thread would wait for itself for ever.
        examples, features = self.prepare(records)
        return self.answer(examples, features, self.logits(features, self.batch_size))

    def as_records(self, records: list[dict] | list[str] | str, flag: str = "inputs") -> list[dict]:
        """``records`` as the records the task reads: a record (a dict of the task's input fields) as it is; a text
        (a ``str`` item, or one ``str`` instead of the list) as ``{field: text}`` for a task with one required field,
        as the HTTP API takes it. Anything else raises UserError saying what a record of this task is."""
        required, _ = self.task.input_fields
        field = required[0] if len(required) == 1 else None
        record = json.dumps(dict.fromkeys(required, "..."), ensure_ascii=False)
        shape = f"a record such as {record}" + (' or a text ("...")' if field else "")
        items = [records] if isinstance(records, str) else records
        if not isinstance(items, (list, tuple)):
            raise UserError(f"{flag}: expected a list of inputs, each {shape}; found a {type(items).__name__}")
        for i, item in enumerate(items):
            if isinstance(item, str) and field is None:
                raise UserError(
                    f"{flag}[{i}]: a text alone is taken only by a task with one input field; a {self.task.name} "
                    f"input is a record such as {record}"
                )
            if not isinstance(item, (str, dict)):
                found = json.dumps(item, ensure_ascii=False, default=str)[:40]
                raise UserError(f"{flag}[{i}]: expected {shape}, found {found}")
        return [{field: item} if isinstance(item, str) else item for item in items]

    def input_names(self) -> dict[str, tuple[str, ...]]:
        """Each input field of the task with the keys a record may give it under, its own name first, as the task's
        reader finds them: for a classifier ``text`` also as ``text_a``, ``sentence``... or the column it was
        trained on, ``text_pair`` also as ``text_b``...; NER reads ``text`` alone. Asked of ``read_records`` itself,
        one record per name, so that ``serve`` takes the keys this Predictor takes."""
        from ernie_ft.data.readers import PAIR_COLUMNS, TEXT_COLUMNS

        required, optional = self.task.input_fields
        names = {name: [name] for name in (*required, *optional)}
        given = {field: [] for field in names}
        if required:
            given[required[0]] = [*TEXT_COLUMNS, self.data.text_column]
        if optional:
            given[optional[0]] = [*PAIR_COLUMNS, self.data.text_pair_column]
        for field, candidates in given.items():
            for key in candidates:
                if isinstance(key, str) and not key.isdigit() and key not in names[field] and self._reads(field, key):
                    names[field].append(str(key))
        return {field: tuple(keys) for field, keys in names.items()}

    def _reads(self, field: str, key: str) -> bool:
        """Whether the task reads ``field``'s text from a record's ``key``."""
        required, _ = self.task.input_fields
        probe = "ernie_ft probe"
        record = {name: f"{name} text" for name in required if name != field} | {key: probe}
        try:
            examples = self.task.read_records([record], self.data, "inputs")
        except UserError:
            return False
        return probe in self.task.texts(examples)

    def prepare(self, records: list[dict] | list[str] | str, flag: str = "inputs") -> tuple[list, list[dict]]:
        """(examples, features) for ``records`` (see ``as_records``), as ``predict`` makes them from a JSON Lines file
        of them."""
        examples = self.task.read_records(self.as_records(records, flag), self.data, flag)
        encodings = self.loaded.pipeline.encode_many(self.task.texts(examples), word_ids=False)
        features = self.task.featurize(examples, encodings, self.loaded.pipeline, self.labels, self.data)
        if not features:
            raise UserError(f"{flag}: no model input could be built from the records")
        return examples, features

    def logits(self, features: list[dict], batch_size: int):
        """The model's outputs for ``features``, in forward passes of at most ``batch_size`` windows."""
        return compute_logits(
            self.loaded.model,
            features,
            self.loaded.pipeline.pad_id,
            batch_size,
            head=self.task.head,
            **task_batching(self.task, self.loaded.pipeline),
        )

    def answer(self, examples: list, features: list[dict], logits, threshold: Optional[float] = None) -> list[dict]:
        """One ``predict`` record per example; ``threshold``: a probability this answer decides with instead of the
        model's (a served request's own; ``TaskHooks.use_threshold``)."""
        task = self.task
        if threshold is not None:
            task = copy.copy(task)  # this answer's alone: requests are answered side by side
            task.use_threshold(threshold)
        return task.predict(logits, features, examples, self.labels, self.data)


_LOADED: dict[tuple, tuple] = {}
"""The models the unpickled copies of Predictors loaded in this process, by (directory, engine, settings)."""
