"""What pretraining gives each task: pretrain scratch:tiny with each objective, fine-tune it on ChnSentiCorp,
CLUENER (--crf) and CMRC 2018 with the same learning-rate grid as random initialisation, and print the table.

    python experiments/pretrain_gain.py --out runs/gain [--rows random,mlm-char,mlm-word,electra] \
        [--tasks chnsenticorp,cluener,cmrc2018] [--steps 2089] [--lrs 5e-4,1e-3] [--seeds 42] [--threads 2] \
        [--pretrain-args "--lr 1e-3 --epochs 2" --tag lr1e-3-2ep]

Pretraining is ``tasks/pretrain_corpus.yaml`` (../shared/data/corpus plus the texts of the training
splits; never a dev or test text) with ``--pretrain-args`` added to its command, stopped after ``--steps``
optimizer steps when given (else it runs its whole schedule); ``--tag`` names such a variant in every
directory and in the table. A row ``NAME=DIR`` fine-tunes an existing pretrained model ``DIR`` under the
name ``NAME`` (e.g. ``best/`` copied from the middle of a longer run). Fine-tuning is each
task's recipe in ``tasks/`` with ``--model`` set to the pretrained ``best/`` (or ``scratch:tiny`` for
the random row) and each learning rate of the task's grid (two around its recipe's, the same for every
row; ``--lrs`` replaces them); the learning rate with the best dev score for the first seed is reported,
with its test score where the task has one, and further ``--seeds`` rerun it (the table gives their mean
and range). Every run writes its own directory under ``--out`` and is skipped when its ``metrics.json``
exists, so the script resumes where it stopped; a stopped pretraining run resumes.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBJECTIVES = {
    "mlm-char": ("--objective", "mlm", "--masking", "char"),
    "mlm-word": ("--objective", "mlm", "--masking", "word"),
    "electra": ("--objective", "electra", "--masking", "word"),
}
TASKS = {  # recipe, module, dev metric, what the table shows, learning rates (around the recipe's)
    "chnsenticorp": ("tasks/chnsenticorp.yaml", "classify", "accuracy", ("accuracy",), "5e-4,1e-3"),
    "cluener": ("tasks/cluener.yaml", "ner", "f1", ("f1",), "1e-3,2e-3"),
    "cmrc2018": ("tasks/cmrc2018.yaml", "qa", "f1", ("em", "f1"), "5e-4,1e-3"),
}


def run(command: list[str], out: str, log: str) -> dict:
    """Run a training command unless ``out/metrics.json`` exists; its metrics."""
    metrics = os.path.join(out, "metrics.json")
    if not os.path.isfile(metrics):
        print("+", " ".join(command), flush=True)
        with open(log, "a") as f:  # append: never truncate the log of a run that holds the directory
            subprocess.run(command, check=True, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    with open(metrics, encoding="utf-8") as f:
        return json.load(f)


def pretrain(row: str, args) -> str:
    """The pretrained ``best/`` of ``row``, pretraining it first unless it exists."""
    out = os.path.join(args.out, f"pre-{row_name(row, args)}")
    if not os.path.isfile(os.path.join(out, "metrics.json")):  # written when the run ends; a stopped one resumes
        again = "--resume" if os.path.isdir(os.path.join(out, "last")) else "--overwrite"
        stop = ["--stop-after-steps", str(args.steps)] if args.steps else []
        command = [
            sys.executable,
            "-m",
            "ernie_ft.pretrain",
            "--config",
            "tasks/pretrain_corpus.yaml",
            *OBJECTIVES[row],
            *shlex.split(args.pretrain_args),
            *stop,
            "--threads",
            str(args.threads),
            "--output",
            out,
            again,
        ]
        print("+", " ".join(command), flush=True)
        with open(out + ".log", "a") as f:
            subprocess.run(command, check=True, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    return os.path.join(out, "best")


def row_name(row: str, args) -> str:
    """``row`` with ``--tag`` appended: the name of its directories and of its line in the table."""
    return f"{row}-{args.tag}" if args.tag and row in OBJECTIVES else row


def fine_tune(row: str, model: str, task: str, lr: str, seed: str, args) -> dict:
    recipe, module = TASKS[task][:2]
    out = os.path.join(args.out, f"{task}-{row}-lr{lr}-seed{seed}")
    model_flags = ["--model", "scratch:tiny"] if model == "scratch:tiny" else ["--model", model, "--vocab", ""]
    extra = ["--crf"] if task == "cluener" else []
    return run(
        [
            sys.executable,
            "-m",
            f"ernie_ft.{module}",
            "--config",
            recipe,
            *model_flags,
            *extra,
            "--lr",
            lr,
            "--seed",
            seed,
            "--threads",
            str(args.threads),
            "--output",
            out,
            "--overwrite",
        ],
        out,
        out + ".log",
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rows", default="random,mlm-char,mlm-word,electra")
    p.add_argument("--tasks", default="chnsenticorp,cluener,cmrc2018")
    p.add_argument("--steps", type=int, help="stop pretraining after this many optimizer steps (2089: one epoch)")
    p.add_argument("--pretrain-args", default="", help='flags added to the pretraining command, e.g. "--lr 1e-3"')
    p.add_argument("--tag", default="", help="names the --pretrain-args variant in its directories and the table")
    p.add_argument("--lrs", help="learning rates for every task (default: each task's grid in TASKS)")
    p.add_argument("--seeds", default="42")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    table = {}  # this call's cells, merged into results.json at the end
    for row in args.rows.split(","):
        if "=" in row:  # NAME=DIR: an existing pretrained model
            row, model = row.split("=", 1)
        else:
            model = "scratch:tiny" if row == "random" else pretrain(row, args)
            row = row_name(row, args)
        table.setdefault(row, {})["model"] = model
        for task in args.tasks.split(","):
            _, _, metric, shown, grid = TASKS[task]
            first, *others = args.seeds.split(",")
            runs = {lr: fine_tune(row, model, task, lr, first, args) for lr in (args.lrs or grid).split(",")}
            lr = max(runs, key=lambda k: runs[k]["dev"][metric])  # picked on dev, with the first seed
            results = [runs[lr]] + [fine_tune(row, model, task, lr, seed, args) for seed in others]
            table.setdefault(row, {})[task] = {
                "lr": lr,
                "seeds": [first, *others],
                **{
                    f"{split} {m}": [r[split][m] for r in results]
                    for split in ("dev", "test")
                    if split in runs[lr]
                    for m in shown
                },
            }
    table = merge_results(os.path.join(args.out, "results.json"), table)
    print("each cell: the mean over its seeds, and the lowest and highest where there are several\n")
    print("| init | " + " | ".join(TASKS) + " |")
    print("|---|" + "---|" * len(TASKS))
    for row, cells in table.items():
        print(
            f"| {row} | " + " | ".join(table_cell(task, cells[task]) if task in cells else "" for task in TASKS) + " |"
        )
    print("\ncurves:", plot_pretraining(table, os.path.join(args.out, "pretraining.png")))


def merge_results(path: str, new: dict) -> dict:
    """``new`` cells merged into those of ``path`` under a lock, so calls running side by side keep each
    other's cells: a cell at the same learning rate keeps the seeds only the file has (a call with
    ``--seeds 42,44`` does not drop seed 43 of an earlier call), one at a new learning rate replaces it.
    The merged table."""
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        table = {}
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                table = json.load(f)
        for row, cells in new.items():
            for key, cell in cells.items():
                old = table.setdefault(row, {}).get(key)
                table[row][key] = (
                    merge_seeds(old, cell)
                    if isinstance(cell, dict) and isinstance(old, dict) and old.get("lr") == cell["lr"]
                    else cell
                )
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(table, f, indent=1)
        os.replace(path + ".tmp", path)
    return table


def merge_seeds(old: dict, new: dict) -> dict:
    """One cell with the seeds of both (``new``'s values where both have a seed), in seed order."""
    metrics = [k for k in new if k not in ("lr", "seeds")]
    by_seed = {s: [old[m][i] for m in metrics] for i, s in enumerate(old["seeds"])}
    by_seed.update({s: [new[m][i] for m in metrics] for i, s in enumerate(new["seeds"])})
    seeds = sorted(by_seed, key=int)
    return {"lr": new["lr"], "seeds": seeds, **{m: [by_seed[s][j] for s in seeds] for j, m in enumerate(metrics)}}


def evaluations(run: str) -> list[dict]:
    """A pretraining run's dev evaluations (``evaluations.jsonl``), in order."""
    with open(os.path.join(run, "evaluations.jsonl"), encoding="utf-8") as f:
        return [r for r in map(json.loads, filter(str.strip, f)) if "masked_accuracy" in r]


def pretraining_curve(model: str) -> list[tuple[float, float]]:
    """(tokens seen in millions, held-out masked accuracy) at each evaluation of the pretraining run whose
    ``best/`` (or a copy of it beside it) is ``model``; [] for a model that is not one.

    A run that continued another run's checkpoint (``--model RUN/best``) counts that run's tokens too, up
    to the evaluation its ``best/`` was saved at (the lowest dev loss), so the curve continues its base's. A
    copy of ``best/`` taken while the run was stopped by ``--stop-after-steps`` ends at that step, though the
    run was resumed later.
    """
    run, saved = os.path.dirname(model), os.path.join(model, "ernie_ft.yaml")
    if not (os.path.isdir(model) and os.path.isfile(os.path.join(run, "evaluations.jsonl")) and os.path.isfile(saved)):
        return []
    with open(saved, encoding="utf-8") as f:
        config = yaml.safe_load(f)["run"]
    train = config["train"]  # one process, as this script runs it: tokens per step, in millions
    per_step = train["batch_size"] * train["grad_accum"] * config["data"]["max_len"] / 1e6
    start, base = 0.0, str(config["model"]["model"])
    base_curve = pretraining_curve(base)
    if base_curve:
        losses = [r.get("electra_loss", r.get("mlm_loss")) for r in evaluations(os.path.dirname(base))]
        start = base_curve[losses.index(min(losses))][0]
    stop = train.get("stop_after_steps") or float("inf")  # a copy saved while the run was stopped there
    return [(start + r["step"] * per_step, r["masked_accuracy"]) for r in evaluations(run) if r["step"] <= stop]


def plot_pretraining(table: dict, path: str) -> str:
    """Each pretrained row's held-out masked accuracy against the tokens its pretraining had seen."""
    from ernie_ft.evaluation.plots import plot_series

    series = {row: pretraining_curve(cells.get("model", "")) for row, cells in table.items()}
    return plot_series(
        {row: points for row, points in series.items() if points},
        path,
        "tokens seen (millions)",
        "held-out masked accuracy",
        "Pretraining scratch tiny (2 x 128)",
    )


def table_cell(task: str, cell: dict) -> str:
    """'dev accuracy 0.8953 (0.8933-0.8975), ... (lr 1e-3, seeds 42,43,44)': each score's mean over the seeds
    and its range."""
    digits = 2 if TASKS[task][1] == "qa" else 4  # QA's EM and F1 are percentages
    scores = []
    for name, values in cell.items():
        if name not in ("lr", "seeds"):
            mean = f"{sum(values) / len(values):.{digits}f}"
            scores.append(
                f"{name} {mean}"
                if len(values) == 1
                else f"{name} {mean} ({min(values):.{digits}f}-{max(values):.{digits}f})"
            )
    return ", ".join(scores) + f" (lr {cell['lr']}, seeds {','.join(cell['seeds'])})"


if __name__ == "__main__":
    main()
