"""The serve page's pictures in docs/: docs/ner-nested-page.png (a ``ner --nested`` model, docs/ner.md) and
docs/relation-page.png (a ``relation`` model, docs/relation.md).

    python docs/pictures/page_pictures.py [--only nested|relation] [--work DIR] [--output-dir docs]

Each model is a ``scratch:2x64`` that memorises 32 training sentences of the shared data set: the first 31 and the
sentence the picture shows (``cmeee-v2/train.json`` for 200 epochs; ``duie-5000/train.jsonl`` with its schema for
120; lr 3e-3, batches of 8, no dropout). It is served with ``python -m ernie_ft serve --model DIR`` and the page
driven in headless Chromium (``serve_page.py`` beside this file): the sentence typed in and submitted, the window
fitted to the page's full height, the screenshot taken. Needs Chromium, ChromeDriver and selenium (as the browser
tests do) and ../shared/data.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from serve_page import Server, chromium_missing, start_chromium, submit

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ERNIE_FT_SHARED_DATA", ROOT.parent / "shared" / "data"))

NESTED_TEXT = "主要不良反应为粒细胞减少、关节炎、肌肉痛等，少部分病例出现胃肠道反应，严重者应停药。"
RELATION_TEXT = "《忘了》是张韶涵演唱的歌曲，由林欣彦作词、作曲，收录在专辑《全面沦陷》中"
MODELS = {  # name: (command and flags, data file, epochs, the picture's sentence)
    "nested": (["ner", "--nested"], "cmeee-v2/train.json", 200, NESTED_TEXT),
    "relation": (["relation", "--schema", "duie-5000/schema.json"], "duie-5000/train.jsonl", 120, RELATION_TEXT),
}
PICTURES = {"nested": "ner-nested-page.png", "relation": "relation-page.png"}


def training_file(name: str, work: Path) -> Path:
    """The 32 sentences ``name``'s model memorises, in its data set's format."""
    _, data, _, text = MODELS[name]
    source = SHARED / data
    if data.endswith(".json"):  # CMeEE: one JSON array
        rows = json.loads(source.read_text(encoding="utf-8"))
        picked = [r for r in rows[:31] if r["text"] != text] + [next(r for r in rows if r["text"] == text)]
        body = json.dumps(picked, ensure_ascii=False, indent=0)
    else:  # DuIE: one record a line
        rows = source.read_text(encoding="utf-8").splitlines()
        picked = [r for r in rows[:31] if json.loads(r)["text"] != text]
        picked.append(next(r for r in rows if json.loads(r)["text"] == text))
        body = "\n".join(picked) + "\n"
    out = work / f"{name}-train{source.suffix}"
    out.write_text(body, encoding="utf-8")
    return out


def train(name: str, work: Path) -> Path:
    from ernie_ft.cli import task_command

    (command, *flags), _, epochs, _ = MODELS[name]
    train_file, out = training_file(name, work), work / name
    flags = [str(SHARED / f) if f.endswith(".json") else f for f in flags]  # --schema: the data set's
    args = [*flags, "--train", str(train_file), "--model", "scratch:2x64", "--epochs", str(epochs), "--lr", "3e-3"]
    args += ["--batch-size", "8", "--dropout", "0", "--seed", "1", "--output", str(out), "--overwrite"]
    if task_command(command)(args) != 0:
        raise SystemExit(f"training {name} failed")
    return out


def picture(browser, name: str, model: Path, work: Path, output: Path) -> None:
    """Serve ``model``, type its sentence into the page, and save the page at full height as ``output``."""
    server = Server(str(model), work)
    try:
        server.wait_ready()
        submit(browser, server.url + "/", {"text": MODELS[name][3]})
        width = browser.get_window_size()["width"]
        browser.set_window_size(width, 200)  # shorter than the page: its scroll height is its content's
        frame = 200 - browser.execute_script("return window.innerHeight")  # the window's own, if any
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(width, height + frame)
        browser.save_screenshot(str(output))
    finally:
        server.stop()
    print(f"{output}: {name} model {model}, the page at {height} px")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(MODELS), help="make one picture (default: both)")
    parser.add_argument("--work", help="where the models and logs go (default: a temporary directory)")
    parser.add_argument("--output-dir", default=str(ROOT / "docs"))
    args = parser.parse_args()
    reason = chromium_missing()
    if reason:
        raise SystemExit(f"error: {reason}")
    work = Path(args.work or tempfile.mkdtemp(prefix="page-pictures-"))
    work.mkdir(parents=True, exist_ok=True)
    browser = start_chromium(Path(tempfile.mkdtemp(prefix="chromium-")))
    try:
        for name in [args.only] if args.only else MODELS:
            picture(browser, name, train(name, work), work, Path(args.output_dir) / PICTURES[name])
    finally:
        browser.quit()


if __name__ == "__main__":
    main()
