"""The ratios the chart at the top of docs/benchmarks.md draws: one JSON file per docs table in benchmarks/results/.

A program that fills one of these tables writes its ratios here when run with ``--record`` (``record``): the row of
the same comparison and CPU kind is replaced, or added. The files were seeded from the tables as they stood.
``chart.py`` draws the chart from them; tests/test_benchmark_results.py checks that every ratio is in its table.

Each file: ``{"table": the docs/benchmarks.md section, "rows": [{"comparison", "row", "ratio", "rounds", "cpu",
"program"}]}``: ``row`` is the start of the docs row the ratio is in, ``ratio`` ernie_ft's rate over the other
stack's (> 1: ernie_ft is faster), ``rounds`` the per-round ratios it is the median of, ``cpu`` the CPU kind
(``cpu.kind``).
"""

from __future__ import annotations

import json
import os

import cpu

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
TABLES = {  # results file: the section of docs/benchmarks.md whose table holds its ratios
    "training": "Training, prediction and pretraining against HF and PaddleNLP",
    "deployment": "CPU deployment: ONNX Runtime and int8",
    "serving": "Serving",
}


def path(table: str) -> str:
    return os.path.join(RESULTS, f"{table}.json")


def load(table: str) -> dict:
    """``table``'s results file, or an empty one naming its docs section."""
    if not os.path.exists(path(table)):
        return {"table": TABLES[table], "rows": []}
    with open(path(table), encoding="utf-8") as f:
        return json.load(f)


def rows() -> list[dict]:
    """Every results file's rows, table by table in ``TABLES`` order, each with its ``table`` (the file's name)."""
    return [{**row, "table": table} for table in TABLES for row in load(table)["rows"]]


def record(table: str, comparison: str, row: str | None, ratios: list[float], program: str) -> str:
    """Write the median of ``ratios`` (one per round, ernie_ft's rate over the other stack's) as ``comparison`` on
    this machine's CPU kind into ``table``'s file. ``row`` is the start of the docs row the figure belongs in; None
    keeps the row of the figure replaced (the same comparison and CPU kind), or leaves it empty for the contributor
    to name when the docs table is brought up to date. Returns the line it printed."""
    ordered = sorted(ratios)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    kind = cpu.kind(cpu.read()["flags"])
    data = load(table)
    before = [r["row"] for r in data["rows"] if (r["comparison"], r["cpu"]) == (comparison, kind)]
    entry = {
        "comparison": comparison,
        "row": row if row is not None else (before[0] if before else ""),
        "ratio": round(median, 2),
        "rounds": [round(r, 2) for r in ratios],
        "cpu": kind,
        "program": program,
    }
    data["rows"] = [r for r in data["rows"] if (r["comparison"], r["cpu"]) != (comparison, kind)] + [entry]
    os.makedirs(RESULTS, exist_ok=True)
    with open(path(table), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    line = f"recorded in {os.path.relpath(path(table))}: {comparison} {entry['ratio']:.2f}x ({kind})"
    print(line)
    return line
