"""The documentation: the site builds with mkdocs --strict, every example of the Python API runs and prints
what its page says, the README stays a front page, and every relative link points at a file."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

DOCS = ROOT / "docs"
EXAMPLES = sorted((DOCS / "examples").glob("*.py"))
PYTHON = ROOT / ".venv" / "bin" / "python"
README_MAX_LINES = 300

# What each example prints (regular expressions, each searched in its standard output).
PRINTS = {
    "skeleton.py": [r"dev accuracy after 1 epoch: (0\.[5-9]\d|1\.00)", r"checkpoint: .*best"],
    "hook_model.py": [
        r"built BiasedClassifier; bound to the task: True",
        r"label\tright\tbias\n正面\t\d+/30\t[+-]\d\.\d{4}\n负面\t\d+/30\t[+-]\d\.\d{4}\n\d+ errors in .*errors\.txt",
        r"loaded for prediction with weights=False: BiasedClassifier \(binds_model\)",
    ],
    "hook_unused_data_settings.py": [
        r"--text-column in --help: True",
        r"--text-pair-column in --help: False",
        r"--window-pooling in --help: False",
        r"--pooling in --help: True",
        r"error: recipe\.yaml: 'data\.text_pair_column' does not apply to this command \(reviews are single texts\)",
    ],
    "hook_reads_corpus.py": [
        r"--corpus FILE\.\.\.",
        r"--corpus in --help: True; --train in --help: False",
        r"error: --corpus is required",
    ],
    "hook_held_out.py": [r"\{'train': 192, 'dev': 48\}", r"with --dev: \{'train': 240, 'dev': 60\}"],
    "hook_read_records.py": [
        r"default: \['房间很干净，早餐也不错', '太吵了，不会再来'\]",
        r"own:     \['房间很干净，早餐也不错', '太吵了，不会再来'\]",
        r"error: inputs\[1\]\.text: ",
    ],
    "hook_input_fields.py": [
        r"accepted: \{'text': '菜很好吃，就是上菜太慢', 'aspect': '服务'\}",
        r"refused: \[\('inputs\.0\.aspect', 'missing'\)\]",
        r"refused: \[\('inputs\.0\.stars', 'extra_forbidden'\)\]",
    ],
    "hook_example_input.py": [r"warm-up input: \{'text': '物流很快，包装完好，五星好评'\} -> 1 example"],
    "hook_stream_features.py": [r"Blocks: \d+ blocks of 32 tokens"],
    "hook_exact_spans.py": [
        r"Sentiment: exact_spans=False, ([1-9]|1[0-6]) tokens for 17 characters",  # pieces: fewer tokens
        r"CharacterSentiment: exact_spans=True, 17 tokens for 17 characters",
    ],
    "hook_collate.py": [r"logits \(64, 2\); the model saw widths \[[\d, ]+\]: multiples of 8: True"],
    "hook_summarize.py": [r"64 rows for 64 inputs; the first: \[\(\d, 0\.\d+\), \(\d, 0\.\d+\)\]"],
    "hook_flat_fields.py": [
        r"a batch of 4 rows holds \d+ masked_positions",
        r"kept whole on every rank of a mesh: \('masked_positions',\)",
        r"64 inputs; scores at their positions: \[\d+, \d+, \d+, \d+\]",
    ],
}


def python() -> str:
    return str(PYTHON) if PYTHON.exists() else sys.executable


@pytest.fixture(scope="module")
def examples_cache(tmp_path_factory) -> str:
    """One cache for every example: the fused kernels are compiled once."""
    return str(tmp_path_factory.mktemp("examples-cache"))


def test_every_example_says_what_it_prints():
    assert sorted(PRINTS) == [p.name for p in EXAMPLES]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_and_prints_what_it_claims(example, tmp_path, examples_cache):
    env = {**os.environ, "ERNIE_FT_CACHE": examples_cache}
    done = subprocess.run(
        [python(), str(example), str(tmp_path / "out")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for pattern in PRINTS[example.name]:
        assert re.search(pattern, done.stdout), f"{example.name} did not print {pattern!r}:\n{done.stdout}"


def test_the_site_builds_strictly_with_the_examples_in_it(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run(
        [python(), "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    api = (site / "python-api" / "index.html").read_text(encoding="utf-8")
    for example in EXAMPLES:  # each example's code is on the page (copied in: see test_pages_read_on_github...)
        first_def = re.search(r"^(?:def|class) (\w+)", example.read_text(encoding="utf-8"), re.M).group(1)
        assert first_def in api, f"{example.name} is not included in python-api.md"
    assert (site / "input-formats" / "index.html").read_text(encoding="utf-8").count("sentiment_train.tsv") > 0


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    text = "\n".join(lines)
    assert "bash scripts/demo.sh" in text and "bash scripts/test.sh" in text


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|<img [^>]*src=\"([^\"]+)\"")


def relative_links(path: Path):
    """(target, line) of every link in a Markdown file that is not a URL or an anchor of the same page."""
    in_code = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = match.group(1) or match.group(2)
            if not re.match(r"[a-z][a-z0-9+.-]*:|#", target):
                yield target, n


MARKDOWN = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), ROOT / "data" / "README.md"]


@pytest.mark.parametrize("page", MARKDOWN, ids=[str(p.relative_to(ROOT)) for p in MARKDOWN])
def test_relative_links_point_at_files(page):
    links = list(relative_links(page))
    missing = [f"{page.name}:{n}: {t}" for t, n in links if not (page.parent / t.split("#")[0]).exists()]
    assert not missing, "links to files that do not exist:\n" + "\n".join(missing)
    if page.name == "README.md" and page.parent == ROOT:
        assert any(t.startswith("docs/") for t, _ in links)  # the front page leads into the site


def test_the_link_checker_sees_links_and_skips_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "[a](docs/a.md) and [b](b.md#part), [web](https://x.org), [here](#top)\n"
        "`[not](a link)`\n```\n[in](code.md)\n```\n![img](pic.png)\n",
        encoding="utf-8",
    )
    assert list(relative_links(page)) == [("docs/a.md", 1), ("b.md#part", 1), ("pic.png", 6)]


INLINED = re.compile(r"<!-- inlined: ([^ :]+)(?::(\d+))? -->\n\n(.*?)\n\n<!-- end inlined -->", re.S)


@pytest.mark.parametrize("page", MARKDOWN, ids=[str(p.relative_to(ROOT)) for p in MARKDOWN])
def test_pages_read_on_github_as_they_are_and_their_copies_equal_the_files(page):
    """No page includes a file (pymdownx.snippets' --8<-- lines show as they are on GitHub): a file's text is
    copied in between ``<!-- inlined: PATH[:FIRST LINE] -->`` and ``<!-- end inlined -->``, in a fence or not, and
    stays equal to the file, which the examples' test runs."""
    text = page.read_text(encoding="utf-8")
    assert "--8<--" not in text, f"{page.name} includes a file; copy it in (see this test)"
    for path, first, body in INLINED.findall(text):
        lines = (ROOT / path).read_text(encoding="utf-8").splitlines(keepends=True)[int(first or 1) - 1 :]
        fence = re.fullmatch(r"```\w*\n(.*\n)```", body, re.S)
        assert (fence.group(1) if fence else body + "\n") == "".join(lines), f"{page.name}: its copy of {path} differs"
    assert text.count("<!-- inlined: ") == len(INLINED.findall(text)), f"{page.name}: an inlined copy is not closed"


def test_the_api_page_holds_every_example():
    inlined = {path for path, _, _ in INLINED.findall((DOCS / "python-api.md").read_text(encoding="utf-8"))}
    assert inlined == {str(p.relative_to(ROOT)) for p in EXAMPLES}
