"""What a task is: the protocol the trainer drives, and how a task is named.

A task owns reading, labels, features, loss, metrics and the shape of predictions; the
trainer owns the model, optimizer, schedule and checkpoints. A custom task is one small file
(see ``tasks/multilabel_intent.py``) named on the command line as ``module:attr`` or
``path/to/file.py:attr``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from typing import ClassVar, Optional, Protocol

from ernie_ft.config import DataConfig
from ernie_ft.dev_split import split_dev
from ernie_ft.errors import UserError

# Built-in tasks: python -m ernie_ft.<name>. One explicit dict, no registry filled by imports.
BUILTIN = {
    "classify": "ernie_ft.classify:Classification",
    "ner": "ernie_ft.ner:NER",
    "qa": "ernie_ft.qa:QA",
    "pretrain": "ernie_ft.pretrain:Pretraining",
    "relation": "ernie_ft.relation:Relation",
}


class Task(Protocol):
    """What every task has: three attributes and eight methods. The optional hooks are ``TaskHooks``."""

    name: str
    """How checkpoints refer to the task: a BUILTIN key or 'module:attr' / 'file.py:attr'."""
    head: str
    """The model head: 'sequence' (one output row per input), 'token', 'span' or 'mlm'."""
    metric: str
    """Default dev metric for picking the best checkpoint; greater is better, except for losses and perplexity."""

    def read(self, path: str, data: DataConfig, flag: str, labelled: bool = True) -> list:
        """Examples from a file; bad input raises UserError naming the file and line."""

    def fit_labels(self, train: list) -> list[str]:
        """The label set, from the training examples; its order is the model's output order."""

    def check_labels(self, examples: list, labels: list[str], data: DataConfig, flag: str) -> None:
        """Raise UserError for dev/test labels that train never had (unless allowed)."""

    def texts(self, examples: list) -> list[str]:
        """Every text the task needs encoded, in a fixed order that ``featurize`` relies on."""

    def featurize(self, examples: list, encodings: list, pipeline, labels: list[str], data: DataConfig) -> list[dict]:
        """Model inputs ('input_ids', 'token_type_ids'), targets and 'doc' (example index) per window.

        Every other key is a target the collator stacks (or pads, for a 'token' head's 'labels'),
        except keys starting with '_': bookkeeping (offsets, window positions) that stays on the
        feature for ``evaluate`` and ``predict``.
        """

    def loss(self, logits, batch: dict):
        """A scalar paddle Tensor from the model's logits and a collated batch."""

    def evaluate(self, logits, features: list[dict], examples: list, labels: list[str], data: DataConfig) -> dict:
        """Metrics (floats) from all windows' logits (numpy, one row per feature)."""

    def predict(self, logits, features: list[dict], examples: list, labels: list[str], data: DataConfig) -> list[dict]:
        """One JSON-serialisable record per example."""


class TaskHooks:
    """The optional parts of a task, each declared once with the behaviour a task gets without it.

    The built-in tasks subclass it; a task class that does not is given it as a base when it is
    loaded (``resolve_task``), so the trainer, the server and the commands call every hook on every
    task. A hook that returns None asks for the usual behaviour, as its docstring says.
    """

    name: str = ""
    """The ``Task.name`` a task that sets none gets: empty, and ``create_task`` gives it the spec it was loaded by."""
    model_class: ClassVar[Optional[str]] = None
    """'module:Class' of the model to build instead of the head's PaddleNLP class (a CRF tagger, ELECTRA)."""
    reads_corpus: ClassVar[bool] = False
    """True: the data flag is ``--corpus FILE...`` (unlabelled text, streamed) instead of ``--train FILE``."""
    unused_data_settings: ClassVar[dict] = {}
    """``{DataConfig field: why}`` for the data settings the task never reads: they get no flag, and a
    recipe that sets one is an error, so a user's setting is never silently ignored."""
    flat_fields: ClassVar[tuple] = ()
    """Batch entries not indexed by row (e.g. masked positions into the flattened batch): a
    tensor-parallel mesh keeps them whole on every rank."""
    input_fields: ClassVar[tuple] = (("text",), ())
    """(required, optional) field names of one input record, as ``serve`` takes it in a request."""
    binds_model: ClassVar[bool] = False
    """True when ``bind`` needs the trained model even where another engine runs the forward pass (NER's CRF
    decodes the exported model's logits with its transitions): the checkpoint's weights are then always loaded."""
    binds_saved_arrays: ClassVar[bool] = False
    """With ``binds_model``: True when ``bind`` takes the saved weights as numpy arrays by name
    (``models.model_dir.SavedArrays``: ``model.crf_transitions``) where another engine runs the forward pass, so that
    running an export needs no Paddle; False (the default): it gets the dygraph model, built with Paddle."""
    reads_records_apart: ClassVar[bool] = False
    """True when ``read_records`` reads any part of a file's records as it reads them all (no record depends on
    another: a default id, a check of repeated ids): ``predict`` then streams a large input chunk by chunk. False (the
    default, and QA's): the file is read whole."""
    example_input: ClassVar[Optional[dict]] = None
    """One input record that ``serve`` warms the model up with (None: '你好，世界。' in each required field)."""

    @property
    def decides_by_threshold(self) -> bool:
        """Whether predictions are the outputs scoring above a probability threshold (``ernie_ft.thresholds``): then
        ``--threshold`` and ``--tune-thresholds`` apply, and ``tune`` and ``use_threshold`` do something."""
        return False

    @property
    def tunes_thresholds(self) -> bool:
        """Whether this run tunes the task's thresholds on dev (``--tune-thresholds``): the trainer then calls
        ``tune`` before every dev evaluation, and says once what it tunes on."""
        return False

    def tune(self, logits, features: list[dict], examples: list, labels: list[str], data: DataConfig) -> dict:
        """Choose the thresholds that score best on these dev examples and decide with them from now on; returns
        them as the entries the dev metrics record (``learned_options`` takes them back from the best evaluation).
        Called by the trainer on dev only, never on test. {}: nothing tuned."""
        return {}

    def threshold_of(self, output: str) -> Optional[float]:
        """The probability at which ``output`` (a label, an entity type, a predicate) counts as the task decides now
        (its tuned, given or default threshold); None for a task that decides by no threshold (``select`` centres
        its margin and least confidence on it)."""
        return None

    def use_threshold(self, threshold: float) -> None:
        """Decide with the probability ``threshold`` (``--threshold`` given to predict, evaluate or serve, or a
        request's own), replacing any thresholds the run learned. Only for a task that ``decides_by_threshold``."""
        from ernie_ft.thresholds import not_applicable

        raise not_applicable(self.name)

    def keep_scores_above(self, probability: float) -> None:
        """From now on ``summarize`` keeps every output scoring above ``probability``, though the task decides
        higher: a server whose requests may give a lower threshold of their own. Nothing to do (the default) for a
        task whose summaries keep every score."""

    @classmethod
    def recorded_options(cls, options: dict, run: Optional[dict] = None) -> dict:
        """The task options a checkpoint recorded (``run.json``'s ``task:``), as this version names them: a task whose
        options were renamed or changed meaning maps an older checkpoint's here (``run``: the whole run config the
        checkpoint recorded, which tells its age). Default: as they are."""
        return options

    @property
    def exact_spans(self) -> bool:
        """Whether the text pipeline must encode characters rather than learned pieces of a vocabulary
        extension: True for token and span heads, whose entity or answer edges may fall inside a piece."""
        return self.head in ("token", "span")

    def read_records(self, records: list[dict], data: DataConfig, flag: str) -> list:
        """Examples from input records in memory (a served request's ``inputs``), the same ones ``read`` gives
        for a JSON Lines file of those records with ``labelled=False``; a bad field raises UserError naming it
        as ``{flag}[i].field``. The default writes the records to a temporary JSONL file for ``read``: it is
        there for tasks written before this hook; the built-in tasks read records directly."""
        import json
        import tempfile

        with tempfile.TemporaryDirectory(prefix="ernie_ft-records-") as folder:
            path = os.path.join(folder, f"{flag}.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
            return self.read(path, data, flag, labelled=False)

    def bind(self, model) -> None:
        """Called with the built model before training or prediction (a loss or decoder with parameters)."""

    def held_out(self, train: list, data: DataConfig) -> tuple[list, Optional[list]]:
        """(train, dev) when no ``--dev`` is given; dev None: evaluate nothing. The default holds out
        ``--dev-split`` of train (``split_dev``), else nothing."""
        return split_dev(train, data.dev_split)

    def stream_features(self, examples: list, pipeline, data: DataConfig):
        """(features, source) read lazily from disk instead of ``texts`` + ``featurize`` (a pretraining
        corpus); None: the usual path."""
        return None

    def collate(self, features: list[dict], pipeline, seed: int, epoch: Optional[int]) -> Optional[dict]:
        """The task's own batch of ``features`` (``epoch`` None in evaluation: fixed masks); None: the
        usual dynamic padding and stacking (``data.batching.collate``)."""
        return None

    def summarize(self, outputs, batch: dict) -> Optional[list]:
        """One row per input of a batch's evaluation outputs (a paddle Tensor or dict of them); None:
        the outputs as they are (see ``models.modeling.compute_logits``)."""
        return None

    def report(
        self, logits, features: list[dict], examples: list, labels: list[str], data: DataConfig, out_dir: str
    ) -> Optional[str]:
        """``evaluate``'s printed report (tables, pictures written to ``out_dir``); None: the metrics on one line."""
        return None

    def tally(self, labels: list[str], data: DataConfig, out_dir: str):
        """What keeps this task's metrics chunk by chunk, for ``evaluate`` over a labelled file too large to hold
        (``evaluation.tallies``): an object with ``add(logits, features, examples)`` per chunk, ``count``,
        ``metrics()`` and ``report(out_dir)`` (equal to ``evaluate`` and ``report`` over the whole file), and
        ``discard()`` (a stopped run's files removed). None (the default): the file is scored whole."""
        return None

    def learned_options(self, dev: Optional[dict]) -> dict:
        """Task options learned in training that the best checkpoint records beside the run's (per-label thresholds
        tuned on dev), from the best dev evaluation's metrics ``dev``; the task takes them on for the test
        evaluation. {}: none."""
        return {}

    takes_class_weights: ClassVar[bool] = False
    """Whether the task takes ``--class-weights`` (its loss weighted per label): the advice printed when a dev
    evaluation's predictions collapse onto one label then suggests it."""
    distillation: ClassVar[Optional[str]] = None
    """'module:Class' of the task that trains a student on this task's checkpoints as its teacher (``python -m
    ernie_ft distill``): the student's kind, its loss and what it takes from the teacher are that class's. None:
    distill refuses a checkpoint of this task as its teacher."""

    @property
    def output_kind(self) -> str:
        """What the model's outputs are, as the code that hands them on reads them (``export --format hf``'s head,
        a distillation's teacher): 'softmax' (one label per input, a softmax over ``labels``), 'sigmoid' (a yes or no
        per label: several labels per input), 'tags' (one tag per token, a softmax each), 'answer_span' (a start and
        an end score per token), 'span_scores' (a score per (start, end) span and label), 'tokens' (a vocabulary token
        per masked position) or 'other'. Default: the usual one of ``head``: 'sequence' 'softmax', 'token' 'tags',
        'span' 'answer_span', 'mlm' 'tokens', any other head 'other'."""
        return HEAD_OUTPUTS.get(self.head, "other")


HEAD_OUTPUTS = {"sequence": "softmax", "token": "tags", "span": "answer_span", "mlm": "tokens"}
"""The ``TaskHooks.output_kind`` a task gets from its head when it declares none."""


_WITH_HOOKS: dict[type, type] = {}


def with_hooks(cls: type) -> type:
    """``cls`` if it subclasses ``TaskHooks``, else a subclass of ``cls`` and ``TaskHooks`` (cached), whose
    hooks are the task's own where it has them and the defaults elsewhere."""
    if not isinstance(cls, type) or issubclass(cls, TaskHooks):
        return cls
    if cls not in _WITH_HOOKS:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
        _WITH_HOOKS[cls] = type(cls.__name__, (cls, TaskHooks), namespace)
    return _WITH_HOOKS[cls]


def resolve_task(spec: str) -> type:
    """The task class (or factory) named ``spec``: a BUILTIN name, ``module:attr`` or ``file.py:attr``."""
    target = BUILTIN.get(spec, spec)
    module_name, _, attr = target.partition(":")
    if module_name.endswith(".py"):
        if not os.path.isfile(module_name):
            raise UserError(f"--task: {module_name} not found")
        module_spec = importlib.util.spec_from_file_location(os.path.basename(module_name)[:-3], module_name)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module  # so inspect (option docs) and pickle find it
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise UserError(
                f"--task {spec}: cannot import {module_name} ({e}); built-in tasks: {', '.join(BUILTIN)}"
            ) from None
    if not attr:
        raise UserError(f"--task {spec}: name the task class as {module_name}:ClassName")
    factory = getattr(module, attr, None)
    if factory is None:
        raise UserError(f"--task {spec}: {module_name} has no {attr}")
    return with_hooks(factory)


PROTOCOL_FIELDS = ("name", "head", "metric", "model_class")


def unused_data_settings(task) -> dict[str, str]:
    """The data settings (``DataConfig`` fields) a task (class or instance; None: none) never reads, each with why.

    A task lists them in ``unused_data_settings``: the command line then has no flag for them and a
    recipe that sets one is an error, so a user's setting is never silently ignored.
    """
    return {} if task is None else dict(task.unused_data_settings)


def task_options(cls) -> list[dataclasses.Field]:
    """A dataclass task's own settings: its init fields other than the protocol's attributes.

    Each becomes a command-line flag and a key of the recipe's ``task:`` section, documented
    by the docstring under the field, like the config dataclasses.
    """
    if not dataclasses.is_dataclass(cls):
        return []
    return [f for f in dataclasses.fields(cls) if f.init and f.name not in PROTOCOL_FIELDS]


class HookedTask(TaskHooks):
    """A task object whose class is not a ``TaskHooks`` (a factory's product), with the hooks' defaults.

    Every attribute is looked up here first (what is set on this object: ``create_task``'s name), then on the
    task itself, then among ``TaskHooks``' defaults, so a hook the task has is the task's own; the defaults'
    ``self`` is this object, so they see the task's attributes. Setting an attribute sets it here: the task
    object is never changed.
    """

    def __init__(self, task):
        object.__setattr__(self, "wrapped", task)

    def __getattribute__(self, attr: str):
        own = object.__getattribute__(self, "__dict__")
        if attr in own or attr.startswith("__"):
            return object.__getattribute__(self, attr)
        try:
            return getattr(own["wrapped"], attr)
        except AttributeError:
            return object.__getattribute__(self, attr)

    def __repr__(self) -> str:
        return f"HookedTask({self.wrapped!r})"


def create_task(cls, options: dict | None = None, name: str | None = None) -> Task:
    """An instance of the task class (or factory) with its options and the ``TaskHooks`` defaults (a factory's
    product that is no ``TaskHooks`` is wrapped in a ``HookedTask``); ``name`` if the task sets none."""
    task = with_hooks(cls)(**(options or {}))
    if not isinstance(task, TaskHooks):
        task = HookedTask(task)
    if not task.name:
        task.name = name
    return task


def load_task(spec: str, options: dict | None = None) -> Task:
    """An instance of the task named ``spec`` (see ``resolve_task``) with its options."""
    return create_task(resolve_task(spec), options, spec)


def task_source(spec: str) -> Optional[str]:
    """The absolute path of the code a task ``spec`` would run, found without running any: the file of
    ``file.py:attr`` (relative to the working directory), or the file or package directory that ``module:attr``'s
    top-level module would be imported from. None for a BUILTIN name, a missing file or a module not found."""
    if spec in BUILTIN:
        return None
    module_name = spec.partition(":")[0]
    if module_name.endswith(".py"):
        return os.path.abspath(module_name) if os.path.isfile(module_name) else None
    try:
        found = importlib.util.find_spec(module_name.partition(".")[0])  # a top-level name: nothing is executed
    except (ImportError, ValueError):
        return None
    if found is None:
        return None
    if found.submodule_search_locations:  # a package: its directory holds every module it may import
        return os.path.abspath(list(found.submodule_search_locations)[0])
    return os.path.abspath(found.origin) if found.origin and os.path.isfile(found.origin) else None


def recorded_spec(spec: str) -> str:
    """How a checkpoint records the task ``spec`` (as the training command named it) so that it loads from any
    directory: a BUILTIN name as it is; ``module:attr`` when a new interpreter started elsewhere imports that
    module, from the same file; else the task's file by its absolute path (``/abs/path/intent.py:Intent``)."""
    module_name, colon, attr = spec.partition(":")
    if spec in BUILTIN or not colon:
        return spec
    if module_name.endswith(".py"):  # a file loaded by path is never importable by a name
        return f"{os.path.abspath(module_name)}:{attr}"
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)  # a namespace package or a module built in memory has none
    if path is None or _origin_elsewhere(module_name) == os.path.realpath(path):
        return spec
    return f"{os.path.abspath(path)}:{attr}"


@functools.cache
def _origin_elsewhere(module_name: str) -> Optional[str]:
    """The file a new Python process, started in an empty directory with this environment, would import
    ``module_name`` from (real path), or None: the working directory and the running script's directory are on
    this process's path but not on that one's."""
    code = "import importlib.util, sys; s = importlib.util.find_spec(sys.argv[1]); print(s and s.origin or '')"
    with tempfile.TemporaryDirectory(prefix="ernie_ft-task-") as empty:
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code, module_name], cwd=empty, capture_output=True, text=True, timeout=300
            )
        except (OSError, subprocess.SubprocessError):
            return None
    origin = proc.stdout.strip() if proc.returncode == 0 else ""
    return os.path.realpath(origin) if origin else None
