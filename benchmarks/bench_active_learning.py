"""Active learning, simulated: does ``python -m ernie_ft select`` choose texts that teach a model more than random ones?

    python benchmarks/bench_active_learning.py [--datasets chnsenticorp cluener] [--seeds 1 2 3] [--rounds 5] \
        [--step 200] [--pool 4000] [--dev 600] [--strategies entropy margin least-confidence random] [--out DIR]
    python benchmarks/bench_active_learning.py --report     # the docs table, and docs/active-learning.png

Annotation is simulated on ../shared/data: a pool of --pool training texts (drawn once, with seed 0, after duplicate
texts are dropped) and --dev dev texts (likewise). For each seed s, --step texts of the pool drawn with seed s are
labelled (their gold labels); each round a model is trained from scratch on the labelled texts and scored on the dev
texts (accuracy, entity F1), then ``select`` chooses the next --step texts of the rest of the pool with the strategy
and they are added with their gold labels, until --rounds rounds (--rounds x --step labels). The first round's model
is the same for every strategy of a seed, so it is trained once.

Every model is trained by the command line as a user runs it (``ernie_ft.cli.main``, in this process so that Paddle
is imported once, not 200 times) with one recipe (``RECIPE``), on one thread (``--threads 1``), from random weights
with a character vocabulary of the pool's and dev texts (unlabelled text, the same in every run); the dev score is the
best epoch's. ChnSentiCorp reviews are cut to their first ``MAX_CHARS`` characters (one window of 128 tokens each).

Each result is appended to --results (benchmarks/results/active_learning.json) as it is measured, so a stopped run
keeps what it finished; run again, it skips every (dataset, seed, strategy) whose rounds are all there. --report
prints the table of docs/results.md (mean and range over the seeds) and draws the picture, from that file alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import time

from cpu import line as cpu_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ERNIE_FT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "active_learning.json")
PICTURE = os.path.join(ROOT, "docs", "active-learning.png")
STRATEGIES = ("entropy", "margin", "least-confidence", "random")
MAX_CHARS = 126
"""ChnSentiCorp's reviews (311 characters on average) are cut to this many, so that each is one 128-token window."""
RECIPE = ["--model", "scratch:1x64", "--epochs", "10", "--batch-size", "16", "--threads", "1", "--log-steps", "1000"]
"""The training flags of every run (with the dataset's own below): the smallest shape that learned both tasks from 200
labels in seconds on one core when tried (ChnSentiCorp 0.70 at 200 labels, 0.83 at 1,000)."""
DATASETS = {
    # name: the command, the train and dev files, the dev metric, the dataset's own flags
    "chnsenticorp": dict(
        command="classify",
        files=("chnsenticorp/train.tsv", "chnsenticorp/dev.tsv"),
        metric="accuracy",
        flags=["--lr", "1e-3", "--max-len", "128"],
    ),
    "cluener": dict(
        command="ner",
        files=("cluener2020/train.json", "cluener2020/dev.json"),
        metric="f1",
        flags=["--lr", "3e-3", "--max-len", "64", "--overlapping", "keep-longest"],  # 1 train text of 10,748 overlaps
    ),
}


def read_records(dataset: str, path: str) -> list[dict]:
    """The labelled records of a shared-data file: {'text', 'label'} (a class, or CLUENER's entity dict)."""
    with open(path, encoding="utf-8") as f:
        if dataset == "cluener":
            return [json.loads(line) for line in f if line.strip()]
        _header, *lines = f.read().splitlines()
    records = []
    for line in lines:
        label, _, text = line.partition("\t")
        records.append({"text": text.strip()[:MAX_CHARS].strip(), "label": label})
    return records


def write_records(dataset: str, path: str, records: list[dict]) -> None:
    """``records`` in the format the dataset's command trains on (ChnSentiCorp's TSV, CLUENER's JSON Lines)."""
    with open(path, "w", encoding="utf-8") as f:
        if dataset == "cluener":
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        else:
            f.write("label\ttext_a\n" + "".join(f"{r['label']}\t{r['text']}\n" for r in records))


def key(text: str) -> str:
    """A text with its runs of white space as one space, and none at its ends: how a pool text and ``select``'s answer
    for it are matched, whatever a reader does to white space."""
    return " ".join(text.split())


def unique(records: list[dict], what: str) -> list[dict]:
    """The records with a text seen before (``key``) or none dropped, with one line saying how many: ``select``'s
    answers name a text by itself."""
    seen, kept = set(), []
    for r in records:
        if key(r["text"]) and key(r["text"]) not in seen:
            seen.add(key(r["text"]))
            kept.append(r)
    if len(kept) < len(records):
        print(f"{what}: dropped {len(records) - len(kept)} of {len(records)} records (a repeated or empty text)")
    return kept


def prepare(dataset: str, pool_size: int, dev_size: int, out: str) -> tuple[list[dict], str, str]:
    """(the pool, the dev file, the vocabulary file) of ``dataset`` under ``out``: subsets drawn with seed 0."""
    from ernie_ft.text.scratch import build_vocab, write_vocab

    train_file, dev_file = (os.path.join(SHARED, name) for name in DATASETS[dataset]["files"])
    pool = unique(read_records(dataset, train_file), f"{dataset} train")
    dev = read_records(dataset, dev_file)
    random.Random(0).shuffle(pool)
    random.Random(0).shuffle(dev)
    pool, dev = pool[:pool_size], dev[:dev_size]
    os.makedirs(out, exist_ok=True)
    dev_path, vocab_path = os.path.join(out, "dev" + suffix(dataset)), os.path.join(out, "vocab.txt")
    write_records(dataset, dev_path, dev)
    write_vocab(build_vocab([r["text"] for r in pool + dev]), vocab_path)
    print(f"{dataset}: a pool of {len(pool)} train texts, {len(dev)} dev texts")
    return pool, dev_path, vocab_path


def suffix(dataset: str) -> str:
    return ".json" if dataset == "cluener" else ".tsv"


def ernie_ft(argv: list[str], log: str) -> None:
    """``python -m ernie_ft ARGV`` in this process, its output in ``log``; a failure stops the benchmark."""
    from ernie_ft.cli import main

    with open(log, "w", encoding="utf-8") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        status = main(argv)
    if status:
        sys.exit(f"python -m ernie_ft {' '.join(argv)} failed (exit {status}); see {log}")


def train(dataset: str, records: list[dict], seed: int, run: str, dev: str, vocab: str) -> float:
    """Train a model on ``records`` into ``run`` (from scratch, ``RECIPE``); its best dev score."""
    os.makedirs(run, exist_ok=True)
    train_file = os.path.join(run, "train" + suffix(dataset))
    write_records(dataset, train_file, records)
    spec = DATASETS[dataset]
    argv = [spec["command"], "--train", train_file, "--dev", dev, "--vocab", vocab, *RECIPE, *spec["flags"]]
    argv += ["--seed", str(seed), "--output", os.path.join(run, "model"), "--overwrite"]
    argv += ["--cache-dir", os.path.join(os.path.dirname(dev), "cache")]
    ernie_ft(argv, os.path.join(run, "train.log"))
    with open(os.path.join(run, "model", "metrics.json"), encoding="utf-8") as f:
        return json.load(f)["dev"][spec["metric"]]


def select(run: str, pool: list[dict], rest: list[int], size: int, strategy: str, seed: int) -> list[int]:
    """The pool indices ``select`` chooses among ``rest`` with the model of ``run``, most useful first."""
    texts = os.path.join(run, "unlabelled.jsonl")  # JSON: a text with a tab or a leading '{' stays one text
    with open(texts, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": pool[i]["text"]}, ensure_ascii=False) + "\n" for i in rest)
    chosen = os.path.join(run, "chosen.jsonl")
    argv = ["select", "--model", os.path.join(run, "model", "best"), "--input", texts, "--output", chosen]
    argv += ["--size", str(size), "--strategy", strategy, "--format", "doccano", "--seed", str(seed)]
    ernie_ft(argv, os.path.join(run, "select.log"))
    where = {key(pool[i]["text"]): i for i in rest}
    with open(chosen, encoding="utf-8") as f:
        picked = [key(json.loads(line)["text"]) for line in f if line.strip()]
    lost = [text for text in picked if text not in where]
    if lost or len(picked) != size:
        sys.exit(f"{chosen}: {len(picked)} texts for --size {size}, {len(lost)} not in the pool (e.g. {lost[:1]})")
    return [where[text] for text in picked]


def load(path: str) -> dict:
    if not os.path.exists(path):
        return {"rows": []}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def simulate(args) -> None:
    """Every (dataset, seed, strategy) not yet complete in --results: its rounds, each row saved as measured."""
    data = load(args.results)
    data["setup"] = {
        "pool": args.pool,
        "dev": args.dev,
        "step": args.step,
        "rounds": args.rounds,
        "recipe": " ".join(RECIPE),
        "max_chars": MAX_CHARS,
        "cpu": cpu_line(),
        "command": "python benchmarks/bench_active_learning.py " + " ".join(sys.argv[1:]),
    }
    labels_wanted = [args.step * r for r in range(1, args.rounds + 1)]

    def done(dataset, seed, strategy):
        have = {
            r["labels"] for r in data["rows"] if (r["dataset"], r["seed"], r["strategy"]) == (dataset, seed, strategy)
        }
        return set(labels_wanted) <= have

    def keep(row):
        data["rows"] = [r for r in data["rows"] if [r[k] for k in KEY] != [row[k] for k in KEY]] + [row]
        save(args.results, data)
        print(
            f"{row['dataset']} seed {row['seed']} {row['strategy']}: {row['labels']} labels, dev {row['metric']} "
            f"{row['score']:.4f} ({row['seconds']:.0f} s)",
            flush=True,
        )

    prepared = {}
    for seed in args.seeds:  # seed by seed, so that a stopped run has whole seeds of both datasets
        for dataset in args.datasets:
            todo = [st for st in args.strategies if not done(dataset, seed, st)]
            if not todo:
                continue
            out = os.path.join(args.out, dataset)
            if dataset not in prepared:
                prepared[dataset] = prepare(dataset, args.pool, args.dev, out)
            pool, dev, vocab = prepared[dataset]
            first = random.Random(seed).sample(range(len(pool)), args.step)
            start = os.path.join(out, f"seed{seed}", "start")
            tic = time.perf_counter()
            start_score = train(dataset, [pool[i] for i in first], seed, start, dev, vocab)
            start_seconds = time.perf_counter() - tic
            for strategy in todo:
                row = dict(dataset=dataset, strategy=strategy, seed=seed, metric=DATASETS[dataset]["metric"])
                keep({**row, "labels": args.step, "score": start_score, "seconds": start_seconds})
                labelled, run = list(first), start
                for labels in labels_wanted[1:]:
                    tic = time.perf_counter()
                    rest = sorted(set(range(len(pool))) - set(labelled))
                    labelled += select(run, pool, rest, args.step, strategy, seed * 1000 + labels)
                    run = os.path.join(out, f"seed{seed}", strategy, str(labels))
                    score = train(dataset, [pool[i] for i in labelled], seed, run, dev, vocab)
                    keep({**row, "labels": labels, "score": score, "seconds": time.perf_counter() - tic})


KEY = ("dataset", "strategy", "seed", "labels")


def summary(rows: list[dict]) -> dict:
    """{(dataset, strategy, labels): (mean, lowest, highest, seeds)} of the rows' scores."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["strategy"], r["labels"]), []).append(r["score"])
    return {k: (sum(v) / len(v), min(v), max(v), len(v)) for k, v in groups.items()}


def table(rows: list[dict], dataset: str) -> list[str]:
    """The Markdown table of ``dataset``: a row per label count, a column per strategy, each cell the mean score over
    the seeds and their range (lowest-highest)."""
    stats = summary([r for r in rows if r["dataset"] == dataset])
    strategies = [s for s in STRATEGIES if any(k[1] == s for k in stats)]
    labels = sorted({k[2] for k in stats})
    lines = ["| labels | " + " | ".join(strategies) + " |", "|---" * (len(strategies) + 1) + "|"]
    for n in labels:
        cells = []
        for s in strategies:
            mean, low, high, seeds = stats.get((dataset, s, n), (None, 0, 0, 0))
            cells.append("" if mean is None else f"{mean:.3f} ({low:.3f}-{high:.3f}, {seeds} seed{'s' * (seeds > 1)})")
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return lines


STYLES = {
    "entropy": dict(marker="o"),
    "margin": dict(marker="s", markersize=7, markerfacecolor="none"),
    "least-confidence": dict(marker="^", linestyle=":", markersize=5),
    "random": dict(marker="x", linestyle="--", color="black"),
}


def draw(rows: list[dict], path: str) -> None:
    """Score against labels used, a panel per dataset, a line per strategy: the mean, the seeds' range shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = [d for d in DATASETS if any(r["dataset"] == d for r in rows)]
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.2 * len(datasets), 3.8), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        stats = summary([r for r in rows if r["dataset"] == dataset])
        for strategy in STRATEGIES:
            points = sorted((k[2], v) for k, v in stats.items() if k[1] == strategy)
            if not points:
                continue
            x = [n for n, _ in points]
            style = STYLES[strategy]  # markers and dashes apart: two strategies may choose the same texts
            (line,) = ax.plot(x, [v[0] for _, v in points], label=strategy, **style)
            ax.fill_between(x, [v[1] for _, v in points], [v[2] for _, v in points], color=line.get_color(), alpha=0.15)
        metric = next(r["metric"] for r in rows if r["dataset"] == dataset)
        ax.set(title=dataset, xlabel="labelled texts", ylabel=f"dev {'entity F1' if metric == 'f1' else metric}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(args) -> None:
    data = load(args.results)
    if not data["rows"]:
        sys.exit(f"{args.results}: no results yet; run the simulation first")
    for dataset in DATASETS:
        if any(r["dataset"] == dataset for r in data["rows"]):
            print(f"\n{dataset}, dev {DATASETS[dataset]['metric']}:\n")
            print("\n".join(table(data["rows"], dataset)))
    draw(data["rows"], args.picture)
    print(f"\nwrote {os.path.relpath(args.picture)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of training (default 5: 200 to 1,000 labels)")
    parser.add_argument("--step", type=int, default=200, help="texts labelled at the start and added each round")
    parser.add_argument("--pool", type=int, default=4000, help="training texts the labels are drawn from")
    parser.add_argument("--dev", type=int, default=600, help="dev texts each model is scored on")
    parser.add_argument("--out", default="/tmp/ernie_ft-bench-active-learning", help="runs and their logs")
    parser.add_argument("--results", default=RESULTS, help="the results file (default: %(default)s)")
    parser.add_argument("--report", action="store_true", help="print the table and draw --picture from --results")
    parser.add_argument("--picture", default=PICTURE, help="the picture --report draws (default: %(default)s)")
    args = parser.parse_args()
    if args.report:
        report(args)
        return
    if args.pool < args.step * args.rounds:
        parser.error(f"--pool {args.pool} is smaller than --step x --rounds ({args.step * args.rounds})")
    print(cpu_line(), flush=True)
    simulate(args)


if __name__ == "__main__":
    main()
