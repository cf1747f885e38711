"""benchmarks/bench_active_learning.py's pure parts: the table of mean and range over seeds, the pool's repeated texts,
and docs/results.md's *Active learning* tables equal to what the program prints from its results file."""

import importlib
import json
import re
import sys

import pytest
from conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results" / "active_learning.json"


@pytest.fixture(scope="module")
def bench():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS))  # the programs import cpu.py from their folder
        yield importlib.import_module("bench_active_learning")
    for name in ("bench_active_learning", "cpu"):
        sys.modules.pop(name, None)


def row(strategy, seed, labels, score, dataset="chnsenticorp"):
    return dict(dataset=dataset, strategy=strategy, seed=seed, labels=labels, score=score, metric="accuracy")


def test_the_table_gives_each_strategys_mean_and_range_over_the_seeds(bench):
    rows = [row("random", 1, 200, 0.6), row("random", 2, 200, 0.8), row("entropy", 1, 200, 0.7)]
    rows += [row("entropy", 1, 400, 0.9), row("random", 1, 400, 0.5), row("random", 2, 400, 0.55)]
    rows.append(row("random", 1, 200, 0.1, dataset="cluener"))  # another data set's row stays out
    lines = bench.table(rows, "chnsenticorp")
    assert lines[0] == "| labels | entropy | random |"  # the strategies in STRATEGIES order, the absent ones left out
    assert lines[2] == "| 200 | 0.700 (0.700-0.700, 1 seed) | 0.700 (0.600-0.800, 2 seeds) |"
    assert lines[3] == "| 400 | 0.900 (0.900-0.900, 1 seed) | 0.525 (0.500-0.550, 2 seeds) |"
    assert len(lines) == 4


def test_repeated_texts_leave_the_pool_with_a_line_saying_how_many(bench, capsys):
    records = [{"text": t, "label": "1"} for t in ("好", "差", "好", "", "一般")]
    assert [r["text"] for r in bench.unique(records, "train")] == ["好", "差", "一般"]
    assert "train: dropped 2 of 5 records" in capsys.readouterr().out


def test_the_docs_tables_are_the_ones_the_results_file_gives(bench):
    data = json.loads(RESULTS.read_text(encoding="utf-8"))
    docs = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    section = re.search(r"^## Active learning\n(.*?)(?=^## |\Z)", docs, re.MULTILINE | re.DOTALL)
    assert section, "docs/results.md has no '## Active learning' section"
    datasets = sorted({r["dataset"] for r in data["rows"]})
    assert datasets
    for dataset in datasets:
        for line in bench.table(data["rows"], dataset)[2:]:
            assert line in section[1], f"{RESULTS.name}: {dataset} row {line!r} is not in docs/results.md"
