"""The package's shape: no import cycles (deferred imports included) and no function over 80 lines; the
repository's folders sorted by kind (what a user runs, benchmarks, experiments) with no code outside tests/
importing the tests.

The graph code is tests/helpers/code_report.py's, so the report and the test agree.
"""

import ast
import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import ROOT
from helpers import code_report as report

MAX_FUNCTION_LINES = 80


def write_package(root, files: dict) -> object:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root / "pkg"


def test_cycle_detection_on_small_graphs():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}, "e": {"a"}, "f": set()}
    assert report.strongly_connected(graph) == [["a", "b", "c"], ["d"], ["e"], ["f"]]
    assert report.cycles(graph) == [["a", "b", "c", "a"], ["d", "d"]]
    assert report.cycles({"a": {"b", "c"}, "b": {"c"}, "c": {"a"}}) == [["a", "c", "a"]]  # the shortest way back
    assert report.cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []  # a diamond is no cycle


def test_the_graph_counts_every_kind_of_import(tmp_path):
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from . import a\n",
            "pkg/a.py": "import os\nfrom .b import helper\n",
            "pkg/b.py": """\
            def helper():
                from . import c
                return c
            """,
            "pkg/c.py": "import pkg.a\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/d.py": "from .. import b\nfrom ..a import helper\nfrom . import e\nfrom pkg.sub import d\n",
            "pkg/sub/e.py": "class E:\n    def method(self):\n        from ..c import x\n",
            "pkg/sub/f.py": "if __name__ == '__main__':\n    from pkg.sub.e import E\n",
        },
    )
    graph, imports = report.import_graph(package)
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.c"},
        "pkg.c": {"pkg.a"},
        "pkg.sub": set(),
        "pkg.sub.d": {"pkg.a", "pkg.b", "pkg.sub.e", "pkg.sub.d"},
        "pkg.sub.e": {"pkg.c"},
        "pkg.sub.f": set(),
        "pkg.sub.f (__main__)": {"pkg.sub.e"},
    }  # python -m pkg.sub.f runs f as a second module
    deferred = {(i.source, i.target, i.where) for i in imports if i.deferred}
    assert deferred == {
        ("pkg.b", "pkg.c", "function"),
        ("pkg.sub.e", "pkg.c", "function"),
        ("pkg.sub.f", "pkg.sub.e", "main"),
    }
    found = report.cycles(graph)
    assert found == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"], ["pkg.sub.d", "pkg.sub.d"]]
    assert (
        report.describe_cycle(found[0], imports)
        == "pkg.a (pkg/a.py:2) -> pkg.b (pkg/b.py:2, in a function) -> pkg.c (pkg/c.py:1) -> pkg.a"
    )


def test_function_lengths_run_from_def_to_the_end_of_the_body(tmp_path):
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/m.py": """\
        class K:
            def short(self):
                return 1

        def outer():
            def inner():
                pass
            return inner
        """,
        },
    )
    assert [(f.name, f.path, f.line, f.lines) for f in report.functions(package)] == [
        ("outer", "pkg/m.py", 5, 4),
        ("K.short", "pkg/m.py", 2, 2),
        ("outer.<locals>.inner", "pkg/m.py", 6, 2),
    ]


def test_the_report_prints_json(capsys):
    report.main(["--json", "--top", "3"])
    data = json.loads(capsys.readouterr().out)
    assert "ernie_ft.training.trainer" in data["imports"] and len(data["longest_functions"]) == 3
    assert set(data) >= {"cycles", "sizes", "deferred_only"}


def test_ernie_ft_has_no_import_cycle():
    found = report.report(ROOT / "ernie_ft")["cycles"]
    assert not found, "import cycles in ernie_ft (imports in functions count too):\n" + "\n".join(
        report.cycle_lines(found)
    )


def test_no_function_in_ernie_ft_is_longer_than_80_lines():
    long = [f for f in report.functions(ROOT / "ernie_ft") if f.lines > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(
        f"  {f.name} {f.path}:{f.line} ({f.lines} lines)" for f in long
    )


# ---------------------------------------------------------------- declared layers, string imports, entry points

PACKAGE = ROOT / "ernie_ft"
SPEC = re.compile(r"""["'](ernie_ft(?:\.\w+)*)(?::\w+)?["']""")  # "ernie_ft.x.y" or "ernie_ft.x:Attr" in code


def tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def test_the_import_contracts_hold():
    """setup.cfg's import-linter contracts: the layers from the command line down to errors, and the rules."""
    proc = subprocess.run([tool("lint-imports"), "setup.cfg"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_ruff_finds_nothing_and_the_code_is_formatted():
    check = subprocess.run([tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout[-4000:]
    formatted = subprocess.run([tool("ruff"), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert formatted.returncode == 0, "run `ruff format .`:\n" + formatted.stdout[-4000:]


def named_modules() -> dict[str, set[str]]:
    """Modules that ernie_ft's code names in strings (the built-in task table, model classes, worker and
    server entry points), each with the files that name it: imports the import graph cannot see."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        for name in SPEC.findall(path.read_text(encoding="utf-8")):
            if importlib.util.find_spec(name) is not None:
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_modules_named_in_strings_exist_and_none_reaches_the_command_line():
    import grimp

    named = named_modules()
    assert {"ernie_ft.classify", "ernie_ft.ner", "ernie_ft.qa", "ernie_ft.pretrain"} <= set(named)  # BUILTIN
    graph = grimp.build_graph("ernie_ft")
    entry_points = {m for m in graph.modules if m == "ernie_ft" or m.endswith("__main__")}
    for name in set(named) - entry_points - {"ernie_ft.cli", "ernie_ft"}:
        assert not name.startswith("ernie_ft.cli"), f"{name} is named in {named[name]}: only entry points run cli"
        chain = graph.find_shortest_chain(importer=name, imported="ernie_ft.cli")
        assert chain is None, f"{name} (named in {sorted(named[name])}) reaches the command line: {chain}"


def test_each_entry_point_calls_one_function():
    mains = sorted(PACKAGE.rglob("__main__.py"))
    assert {p.parent.name for p in mains} == {"ernie_ft", "classify", "ner", "qa", "pretrain", "relation"}
    for path in mains:
        body = ast.parse(path.read_text(encoding="utf-8")).body
        statements = [
            node
            for node in body
            if not isinstance(node, (ast.Import, ast.ImportFrom))
            and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        ]
        assert len(statements) == 1 and isinstance(statements[0], ast.Expr), f"{path}: one call, sys.exit(main(...))"
        assert ast.unparse(statements[0]).startswith("sys.exit(main("), path


def test_old_module_paths_still_import_with_a_warning_and_old_commands_run():
    code = (
        "import warnings, ernie_ft.training.trainer as new\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import ernie_ft.trainer as old, ernie_ft.qa_formats, ernie_ft.metrics\n"
        "print(old is new, sorted({str(x.message).split(';')[0] for x in w if x.category is DeprecationWarning}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.stdout.strip() == (
        "True ['ernie_ft.metrics is now ernie_ft.evaluation.classification', "
        "'ernie_ft.qa_formats is now ernie_ft.data.squad', 'ernie_ft.trainer is now ernie_ft.training.trainer']"
    ), proc.stderr[-2000:]
    for old in ("evaluate", "export", "vocab"):
        proc = subprocess.run([sys.executable, "-m", f"ernie_ft.{old}", "--help"], capture_output=True, text=True)
        assert proc.returncode == 0 and f"usage: python -m ernie_ft.{old}" in proc.stdout, proc.stderr[-2000:]
    # a real run, which imports PaddleNLP: a user error, not a traceback
    proc = subprocess.run(
        [sys.executable, "-m", "ernie_ft.export", "--model", str(ROOT / "no-such-run"), "--output", "x"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("error: --model"), proc.stderr


TASK_VALUE = re.compile(r"(^|[._])task$")  # task, self.task, loaded.task, teacher_task: what names a task object


def task_probes(source: str) -> list[str]:
    """The ``getattr``/``hasattr`` calls in ``source`` whose object is a task (see ``TASK_VALUE``)."""
    return [
        ast.unparse(node)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and node.args
        and TASK_VALUE.search(ast.unparse(node.args[0]))
    ]


def test_no_code_probes_a_task_for_what_the_protocol_declares():
    """What export, distillation and the collapse advice need of a task is declared in ``TaskHooks`` (with its
    default), so no code outside ernie_ft/task.py asks a task whether it has an attribute."""
    planted = "if hasattr(task, 'class_weights') or getattr(loaded.task, 'sets', False): print(self.task.head)"
    assert task_probes(planted) == ["hasattr(task, 'class_weights')", "getattr(loaded.task, 'sets', False)"]
    found = {
        str(path.relative_to(ROOT)): probes
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "task.py" and (probes := task_probes(path.read_text(encoding="utf-8")))
    }
    assert not found, f"declare these in TaskHooks and ask the task: {found}"


QUIETS = ("quiet_process", "quiet_imports", "quiet_libraries")
"""The names of ``training.quiet.quiet_process`` (and the command line's and the benchmarks' names for it)."""
QUIET_OWNERS = {
    ("ernie_ft/cli/__init__.py", "run_guarded"): "the command line's entry",
    ("ernie_ft/cli/__init__.py", "quiet_imports"): "the command line's name for it",
    ("ernie_ft/training/worker.py", "<module>"): "a process training's launcher starts",
    ("ernie_ft/inference/pool.py", "work"): "an engine process of predict --nproc",
    ("ernie_ft/tuning/worker.py", "main"): "a trial's process",
    ("ernie_ft/serving/__init__.py", "app_from_env"): "a process of serve --workers",
}
"""Where the process-wide quiet may be put in place: in the processes ernie_ft owns, never in a library function."""


def quiet_calls(source: str, names=QUIETS) -> list[str]:
    """The functions (``<module>`` for the module's own code) in ``source`` that call one of ``names`` (a function's
    name, or its end after a dot: ``logging.set_verbosity`` is ``optuna.logging.set_verbosity`` too)."""
    callers = []

    def calls(node) -> bool:
        callee = isinstance(node, ast.Call) and ast.unparse(node.func)
        return bool(callee) and any(callee == name or callee.endswith("." + name) for name in names)

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            call = calls(child)
            callers.extend([function] if call else [])
            visit(child, name)

    visit(ast.parse(source), "<module>")
    return callers


def test_only_the_processes_ernie_ft_owns_quiet_the_libraries():
    """``quiet_process`` sets warning filters, a filter on PaddleNLP's logger and environment variables for the whole
    process: the command line and the processes ernie_ft starts call it, no library function does (a Python caller's
    warnings and logging stay its own: tests/test_side_effects.py)."""
    planted = "def load(x):\n    runtime.quiet_libraries()\n    return x\nquiet_process()\n"
    assert quiet_calls(planted) == ["load", "<module>"]
    found = {
        (str(path.relative_to(ROOT)), caller)
        for path in sorted(PACKAGE.rglob("*.py"))
        for caller in quiet_calls(path.read_text(encoding="utf-8"))
    }
    assert ("ernie_ft/cli/__init__.py", "run_guarded") in found
    assert not found - QUIET_OWNERS.keys(), f"library functions that quiet the process: {found - QUIET_OWNERS.keys()}"


PROCESS_WIDE = ("matplotlib.use", "logging.set_verbosity", "set_num_threads")
"""Calls that set something for the whole process: matplotlib's backend, Optuna's log level, the math threads."""
PROCESS_WIDE_OWNERS = {
    ("ernie_ft/cli/tune.py", "own_process"): "the tune command's process: Optuna's log level, the pictures' backend",
    ("ernie_ft/training/runtime.py", "set_threads"): "the one place of the math threads: Paddle has no count per "
    "call and none to restore, so training and Paddle's dygraph engine set it as their ``threads`` argument asks",
}
"""Where a process-wide switch may be set: the processes ernie_ft owns, and one function for the thread count."""


def test_only_the_processes_ernie_ft_owns_set_process_wide_switches():
    """A Python caller of ``tuning.search.tune`` keeps its Optuna log level and its matplotlib backend
    (tests/test_tune_study.py); the command sets them for its own process."""
    planted = "def draw(x):\n    import matplotlib\n    matplotlib.use('Agg')\noptuna.logging.set_verbosity(30)\n"
    assert quiet_calls(planted, PROCESS_WIDE) == ["draw", "<module>"]
    found = {
        (str(path.relative_to(ROOT)), caller)
        for path in sorted(PACKAGE.rglob("*.py"))
        for caller in quiet_calls(path.read_text(encoding="utf-8"), PROCESS_WIDE)
    }
    assert ("ernie_ft/cli/tune.py", "own_process") in found
    assert not found - PROCESS_WIDE_OWNERS.keys(), (
        f"library code sets the process: {found - PROCESS_WIDE_OWNERS.keys()}"
    )


# ---------------------------------------------------------------- the folders sorted by kind

MAX_SCRIPTS = 8
TEST_PACKAGES = {"tests", "conftest", "helpers"}  # and every tests/test_*.py module


def repository_python_files() -> list[Path]:
    """The .py files outside tests/ in the repository's folders (those with a committed file), committed or new."""

    def git(*args: str) -> list[str]:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()

    folders = sorted({name.split("/")[0] for name in git("ls-files") if "/" in name} - {"tests"})
    names = git("ls-files", "--cached", "--others", "--exclude-standard", "--", *folders, ":(glob)*.py")
    return sorted(ROOT / name for name in set(names) if name.endswith(".py"))


def imports_of_the_tests(source: str, test_modules: set[str]) -> list[str]:
    """What in ``source`` reaches the tests' code: an import of a tests module (``conftest``, ``helpers``, a
    ``test_*`` module, ``tests``), or a ``sys.path`` entry or file location whose arguments name the tests folder."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
            ("sys.path.insert", "sys.path.append", "spec_from_file_location")
        ):
            strings = [n.value for a in node.args for n in ast.walk(a) if isinstance(n, ast.Constant)]
            names = ["tests"] if any(isinstance(s, str) and re.search(r"(^|/)tests(/|$)", s) for s in strings) else []
            if names:
                found.append(ast.unparse(node))
            continue
        else:
            continue
        found += [ast.unparse(node) for name in names if name.split(".")[0] in test_modules]
    return found


def test_no_file_outside_tests_imports_the_tests():
    """Benchmarks, experiments, docs tools and the library stand on their own: what they share with the tests
    lives outside tests/ (the tests may import it, never the other way)."""
    test_modules = TEST_PACKAGES | {p.stem for p in (ROOT / "tests").glob("*.py")}
    planted = (
        "import sys\nfrom conftest import SHARED\nimport helpers.chromium\nfrom test_serve import Server\n"
        "sys.path.insert(0, str(ROOT / 'tests'))\nimport testing, json\nfrom ernie_ft import helpers_x\n"
    )
    assert imports_of_the_tests(planted, test_modules) == [
        "from conftest import SHARED",
        "import helpers.chromium",
        "from test_serve import Server",
        "sys.path.insert(0, str(ROOT / 'tests'))",
    ]
    files = [p for p in repository_python_files() if p.is_file()]
    assert len(files) > 100  # the library, benchmarks, experiments and docs tools were all read
    found = {
        str(path.relative_to(ROOT)): hits
        for path in files
        if (hits := imports_of_the_tests(path.read_text(encoding="utf-8"), test_modules))
    }
    assert not found, f"move what these use out of tests/ (beside them or into the library): {found}"


def test_scripts_holds_only_what_a_user_runs():
    files = sorted(p.name for p in (ROOT / "scripts").iterdir() if not p.name.startswith("."))
    assert {"setup.sh", "demo.sh", "test.sh"} <= set(files)
    assert len(files) <= MAX_SCRIPTS, f"scripts/ is what a user runs to set up and try the project: {files}"


def readme_rows(readme: Path) -> dict[str, str]:
    """The first cell (a backquoted file name) of each table row of ``readme`` -> the row's other cells."""
    rows = {}
    for line in readme.read_text(encoding="utf-8").splitlines():
        found = re.match(r"\|\s*`([^`]+\.py)`\s*\|(.*)\|\s*$", line)
        if found:
            rows[found[1]] = found[2]
    return rows


def docs_pages_named(text: str) -> list[str]:
    return [page for page in re.findall(r"docs/[\w-]+\.md", text) if (ROOT / page).is_file()]


def test_every_benchmark_and_experiment_is_named_in_its_readme_with_the_docs_it_fills():
    """Each program of benchmarks/ (baselines/ included) and experiments/ has a row in its folder's README that
    names the docs page whose table it fills, or that answers its question."""
    for folder in ("benchmarks", "experiments"):
        rows = readme_rows(ROOT / folder / "README.md")
        programs = sorted(str(p.relative_to(ROOT / folder)) for p in (ROOT / folder).rglob("*.py"))
        assert programs, folder
        unnamed = [p for p in programs if p not in rows]
        assert not unnamed, f"name these in {folder}/README.md with the docs table each fills: {unnamed}"
        no_page = [p for p in programs if not docs_pages_named(rows[p])]
        assert not no_page, f"{folder}/README.md: these rows name no docs page that exists: {no_page}"
    moved = {"experiments": readme_rows(ROOT / "experiments" / "README.md"), "scripts": {}}
    for folder, rows in moved.items():  # a README row of benchmarks/ naming a program that lives elsewhere is stale
        stale = [name for name in readme_rows(ROOT / "benchmarks" / "README.md") if name in rows]
        assert not stale, f"benchmarks/README.md names programs of {folder}/: {stale}"


def test_the_layers_picture_shows_the_contract_in_setup_cfg():
    """docs/layers.png (docs/code-layout.md) is drawn from setup.cfg's layers, which it records in its metadata:
    a layer added, removed or moved in the contract and not redrawn fails here."""
    from PIL import Image

    spec = importlib.util.spec_from_file_location("layers_picture", ROOT / "docs" / "pictures" / "layers.py")
    layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers)
    contract = layers.layers(ROOT / "setup.cfg")
    assert contract[0] == ["cli"] and contract[-1] == ["errors"] and ["data", "evaluation"] in contract
    drawn = json.loads(Image.open(ROOT / "docs" / "layers.png").text["Layers"])
    assert drawn == contract, "setup.cfg's layers changed: redraw with `python docs/pictures/layers.py`"
