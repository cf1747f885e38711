"""``python -m ernie_ft export --format hf``: a trained model as a Hugging Face transformers directory.

The directory is what ``AutoModelFor...from_pretrained`` and ``AutoTokenizer.from_pretrained`` load: config.json
(``model_type`` ``ernie`` when the model has task-type embeddings, else ``bert``; ``id2label``), model.safetensors
under transformers' names (``models.hf.NAMES``), the tokenizer (``TextPipeline.save_hf``) and a model card
(README.md: the data, the command, the metrics). Nothing in it needs ernie_ft or Paddle.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil

from ernie_ft.errors import UserError
from ernie_ft.models import hf
from ernie_ft.recipes import SECTIONS, flag_name
from ernie_ft.task import task_options

ARCHITECTURES = {
    "sequence": "ForSequenceClassification",
    "token": "ForTokenClassification",
    "span": "ForQuestionAnswering",
}
PIPELINES = {"sequence": "text-classification", "token": "token-classification", "span": "question-answering"}
HEAD_OF_OUTPUT = {"softmax": "sequence", "sigmoid": "sequence", "tags": "token", "answer_span": "span"}
"""The outputs (``TaskHooks.output_kind``) a transformers head holds, each with the head that holds them."""


def export_hf(loaded, output: str, model_dir: str) -> None:
    """Write the transformers directory of ``loaded`` (a ``checkpoint.Loaded``) to ``output`` (through a temporary
    directory: a failure leaves nothing)."""
    from safetensors.numpy import save_file

    _check_exportable(loaded, model_dir)
    config = loaded.model.config
    model_type = "ernie" if config.use_task_id else "bert"
    head = loaded.task.head
    architecture = ("Ernie" if model_type == "ernie" else "Bert") + ARCHITECTURES[head]
    state = {name: value.numpy() for name, value in loaded.model.state_dict().items()}
    tensors = hf.to_hf(state, model_type, config.num_hidden_layers, head)
    labels = loaded.labels if head in ("sequence", "token") else []
    tmp = output.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        save_file(tensors, os.path.join(tmp, hf.SAFE_WEIGHTS), metadata={"format": "pt"})
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            problem = _problem_type(loaded.task) if head == "sequence" else None
            json.dump(
                hf.hf_config(config, model_type, head, labels, architecture, problem), f, ensure_ascii=False, indent=2
            )
            f.write("\n")
        max_len = int(loaded.run.get("data", {}).get("max_len") or config.max_position_embeddings)
        differences = loaded.pipeline.save_hf(tmp, model_max_length=max_len)
        write_card(tmp, loaded, os.path.basename(os.path.normpath(output)), architecture, differences)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(output, ignore_errors=True)
    os.rename(tmp, output)


def _problem_type(task) -> str:
    """transformers' ``problem_type`` of a classification task: multi-label when it scores a sigmoid per label
    (``output_kind`` 'sigmoid': --multi-label, or label paths with --hierarchy-separator)."""
    return hf.MULTI_LABEL if task.output_kind == "sigmoid" else "single_label_classification"


def _check_exportable(loaded, model_dir: str) -> None:
    task = loaded.task
    if task.output_kind == "span_scores":
        raise UserError(
            f"--model {model_dir}: a span model (such as ner --nested) scores every (start, end) span per type with "
            "a GlobalPointer head; transformers has no such architecture (ForTokenClassification tags each token "
            "once, so it cannot hold nested entities); export it with --format onnx or the default Paddle Inference "
            "graph"
        )
    if task.head not in ARCHITECTURES or HEAD_OF_OUTPUT.get(task.output_kind) != task.head:
        raise UserError(
            f"--model {model_dir}: --format hf exports classification, NER and QA models; a {task.head!r} head "
            f"with {task.output_kind!r} outputs has no transformers architecture that ernie_ft writes"
        )
    if task.model_class:
        raise UserError(
            f"--model {model_dir}: its model is {task.model_class}, whose layers (e.g. a CRF's transitions) "
            f"transformers' {ARCHITECTURES[task.head]} does not have; --format hf needs a model trained without them "
            "(for NER: without --crf), or use --format onnx"
        )
    if loaded.pipeline.extension is not None:
        raise UserError(
            f"--model {model_dir}: it was trained with a vocabulary extension (pieces placed by jieba words), which "
            "a transformers tokenizer cannot reproduce; use --format paddle or onnx"
        )


def write_card(directory: str, loaded, name: str, architecture: str, differences: list[str]) -> None:
    """README.md in ``directory``: what the model ``name`` was trained on, the command that trained it, its metrics,
    how to load it."""
    run = loaded.run
    data, model = run.get("data", {}), run.get("model", {})
    metrics = _metrics(loaded.directory)
    lines = [
        "---",
        "language: zh",
        "library_name: transformers",
        f"pipeline_tag: {PIPELINES[loaded.task.head]}",
        "---",
        "",
        f"# {name}",
        "",
        f"A `{architecture}` fine-tuned with ernie_ft (PaddlePaddle) on the task `{loaded.task.name}`, "
        f"from `{model.get('model', 'unknown')}`.",
        "",
        "## Data",
        "",
        "| split | file |",
        "|---|---|",
        *(f"| {split} | `{data[split]}` |" for split in ("train", "dev", "test") if data.get(split)),
        "",
        "## Command",
        "",
        "```bash",
        _command(loaded),
        "```",
        "",
    ]
    if metrics:
        lines += ["## Metrics", "", "| split | metric | value |", "|---|---|---|"]
        lines += [f"| {split} | {metric} | {value:.4f} |" for split, metric, value in metrics] + [""]
    lines += [
        "## Use",
        "",
        "```python",
        "from transformers import pipeline",
        "",
        f'nlp = pipeline("{PIPELINES[loaded.task.head]}", model="{name}")',
        "```",
        "",
    ]
    if differences:
        lines += ["## Tokenization", "", "Where transformers' tokenizer differs from ernie_ft's:", ""]
        lines += [f"- {d}" for d in differences] + [""]
    with open(os.path.join(directory, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def _command(loaded) -> str:
    """The command that trains the run again, rebuilt from its recorded config: the task's command, then every setting
    that differs from its default (the config sections' and the task's own) and ``--model`` always, as the flag the
    command line generates for it (``recipes.flag_name``; booleans ``--x`` / ``--no-x``)."""
    task, run = loaded.task, loaded.run
    spec = task.name
    builtin = spec in ("classify", "ner", "qa")
    parts = ["python", "-m", f"ernie_ft.{spec}"] if builtin else ["python", "-m", "ernie_ft", "--task", spec]
    sections = [(run.get(name, {}), dataclasses.fields(cls)) for name, cls in SECTIONS.items()]
    for values, fields in [*sections, (run.get("task", {}), task_options(type(task)))]:
        for f in fields:
            given = f.name in values and (values[f.name] != _default(f) or f.name == "model")
            if not given or _learned(f.name, values):
                continue
            value, flag = values[f.name], flag_name(f.name)
            if isinstance(value, bool):
                parts.append(flag if value else "--no-" + flag[2:])
            elif f.name == "train" and task.reads_corpus:
                parts += ["--corpus", *str(value).split(os.pathsep)]
            else:
                parts += [flag, str(value)]
    return shlex.join(parts)


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def _learned(name: str, values: dict) -> bool:
    """A task option the run learned rather than was given (thresholds tuned on dev): the command tunes it again."""
    return name == "thresholds" and bool(values.get("tune_thresholds"))


def _metrics(directory: str) -> list[tuple[str, str, float]]:
    """(split, metric, value) of the run's metrics.json beside best/, numbers only."""
    for path in (os.path.join(directory, "metrics.json"), os.path.join(os.path.dirname(directory), "metrics.json")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                metrics = json.load(f)
            return [
                (split, name, float(value))
                for split, values in metrics.items()
                if isinstance(values, dict)
                for name, value in values.items()
                if isinstance(value, (int, float)) and not isinstance(value, bool)
            ]
    return []
