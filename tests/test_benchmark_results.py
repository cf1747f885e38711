"""benchmarks/results/*.json and the chart drawn from them (benchmarks/chart.py -> docs/benchmarks.png): every
ratio the chart draws is in its table of docs/benchmarks.md, and the chart reads the files, not figures of its own."""

import importlib
import json
import re
import shutil
import sys

import pytest
from conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
DOCS = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def chart():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS))  # the programs import each other as they run, from their folder
        module = importlib.import_module("chart")
        yield module
    for name in ("chart", "results", "cpu"):
        sys.modules.pop(name, None)


def table_lines(section: str) -> list[str]:
    """The table rows of docs/benchmarks.md's ``## section``, up to the next section."""
    found = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", DOCS, re.MULTILINE | re.DOTALL)
    return [line for line in found[1].splitlines() if line.startswith("|")] if found else []


def in_docs_table(row: dict, section: str) -> bool:
    """Whether a table row of ``section`` starts with (or holds) ``row['row']`` and shows ``row['ratio']``."""
    ratio = re.compile(rf"(?<![\d.]){row['ratio']:.2f}(?!\d)")
    return any(row["row"] in line and ratio.search(line) for line in table_lines(section))


def test_every_ratio_the_chart_draws_is_in_its_docs_table(chart):
    rows = chart.results.rows()
    drawn = chart.bars()
    assert len(drawn) == len(rows) >= 13  # every table's headline ratios, the 13 the tables held when seeded
    assert [(r["comparison"], r["ratio"], r["cpu"]) for r in rows] == drawn
    for row in rows:
        section = chart.results.TABLES[row["table"]]
        assert row["row"], f"benchmarks/results/{row['table']}.json: name the docs row of {row['comparison']}"
        assert table_lines(section), f"docs/benchmarks.md has no table under '## {section}'"
        assert in_docs_table(row, section), (
            f"benchmarks/results/{row['table']}.json: {row['comparison']} {row['ratio']:.2f}x ({row['cpu']}) is in "
            f"no row of '## {section}' starting with {row['row']!r}: bring the docs table up to date"
        )
        for wrong in ({"ratio": 99.99}, {"row": "| no such row"}):  # negative controls: the match is not vacuous
            assert not in_docs_table({**row, **wrong}, section), wrong


def test_the_chart_draws_what_the_results_files_hold(chart, tmp_path, monkeypatch):
    shutil.copytree(BENCHMARKS / "results", tmp_path / "results")
    monkeypatch.setattr(chart.results, "RESULTS", str(tmp_path / "results"))
    data = json.loads((tmp_path / "results" / "serving.json").read_text(encoding="utf-8"))
    data["rows"][0]["ratio"] = 9.99
    (tmp_path / "results" / "serving.json").write_text(json.dumps(data), encoding="utf-8")
    assert (data["rows"][0]["comparison"], 9.99, data["rows"][0]["cpu"]) in chart.bars()
    out = chart.plot(str(tmp_path / "chart.png"))
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", out


def test_a_recorded_run_replaces_the_row_of_its_comparison_and_cpu_kind(chart, tmp_path, monkeypatch, capsys):
    results = chart.results
    monkeypatch.setattr(results, "RESULTS", str(tmp_path))
    monkeypatch.setattr(results.cpu, "read", lambda: {"flags": ["avx2"]})
    results.record("serving", "serving, int8 / FastAPI", "| ratio | C", [3.0, 3.5, 3.2], "bench_serve.py")
    results.record("serving", "serving, int8 / FastAPI", None, [4.0, 4.2], "bench_serve.py")
    monkeypatch.setattr(results.cpu, "read", lambda: {"flags": ["avx2", "avx512f", "avx512_vnni"]})
    results.record("serving", "serving, int8 / FastAPI", None, [5.0], "bench_serve.py")
    rows = results.load("serving")["rows"]
    expected = [(4.1, [4.0, 4.2], "AVX2", "| ratio | C"), (5.0, [5.0], "AVX-512 VNNI", "")]  # AVX2's replaced
    assert [(r["ratio"], r["rounds"], r["cpu"], r["row"]) for r in rows] == expected
    assert results.load("serving")["table"] == "Serving"
    assert "recorded in" in capsys.readouterr().out
