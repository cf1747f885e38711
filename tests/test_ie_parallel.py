"""Data and tensor parallelism of the nested tagger (``ner --nested``) and the relation extractor, against one process.

One job of 2 CPU processes (gloo; this file run by ``paddle.distributed.launch``) trains each model twice: as 2
data-parallel replicas of half the batch, and as one 2-way tensor-parallel group (the encoder's matrices split by
``TENSOR_PARALLEL_PLAN``, the span heads replicated). The test's own process trains each on the whole batch. Same
global batches at the same lr (``--lr-scaling none``): the same weights up to float32 rounding (``adam_drift``).
"""

import json
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import numpy as np
import pytest

STEPS, LR = 3, 2e-3
LAYOUTS = {
    "dp": ["--batch-size", "3", "--nproc", "2"],
    "tp": ["--batch-size", "6", "--nproc", "2", "--tensor-parallel", "2"],
}
TASKS = {"nested": ("ner", ["--nested"], "nested.json"), "relation": ("relation", [], "relation.jsonl")}


def args(task: str, data: Path, out: Path, *extra) -> tuple:
    """(command, its arguments): 6 sentences, dev = train, a tiny random model, 3 steps of one global batch of 6."""
    command, flags, name = TASKS[task]
    train = str(data / name)
    from helpers.rounding import ADAM_EPSILON

    return command, [
        *flags, "--train", train, "--dev", train, "--model", "scratch:tiny", "--threads", "1", "--max-len", "32",
        "--epochs", str(STEPS), "--dropout", "0", "--seed", "2", "--warmup", "0", "--lr", str(LR),
        "--lr-scaling", "none", "--adam-epsilon", str(ADAM_EPSILON), "--eval-steps", "2", "--output", str(out), *extra,
    ]  # fmt: skip


def launched(root: Path) -> None:
    """In each launched process: every task in every layout, one after the other (the job starts once). Rank 0
    writes ``{task}-tp/sharded.json``: the names of the parameters the mesh split (Shard placements) in the model
    that trained."""
    from ernie_ft.cli import task_command
    from ernie_ft.training.parallel import Parallel

    prepare, out = Parallel.prepare, {}

    def recording(self, model, *a, **k):
        prepared = prepare(self, model, *a, **k)
        if self.mesh is not None and self.is_main:
            names = [n for n, p in prepared[0].named_parameters() if p.is_dist() and "Shard" in str(p.placements)]
            (out["run"] / "sharded.json").write_text(json.dumps(names))
        return prepared

    Parallel.prepare = recording
    for task in TASKS:
        for layout, extra in LAYOUTS.items():
            out["run"] = root / f"{task}-{layout}"
            command, argv = args(task, root, out["run"], *extra)
            assert task_command(command)(argv) == 0


if __name__ == "__main__":  # python -m paddle.distributed.launch ... tests/test_ie_parallel.py ROOT
    launched(Path(sys.argv[1]))
    sys.exit(0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The output directory holding ``{task}-{one,half-lr,dp,tp}``: one process in this one, the rest launched."""
    from conftest import ROOT
    from test_nested_ner import cmeee
    from test_relation import duie

    from ernie_ft.cli import task_command

    root = tmp_path_factory.mktemp("ie-parallel")
    (root / "nested.json").write_text(cmeee(), encoding="utf-8")
    (root / "relation.jsonl").write_text(duie(), encoding="utf-8")
    launch = ["-m", "paddle.distributed.launch", "--log_dir", str(root / "logs"), "--nproc_per_node", "2", __file__]
    proc = subprocess.Popen([sys.executable, *launch, str(root)], stdout=PIPE, stderr=PIPE, text=True, cwd=ROOT)
    for task in TASKS:  # while the job runs
        for name, extra in (("one", ["--batch-size", "6"]), ("half-lr", ["--batch-size", "6", "--lr", str(LR / 2)])):
            command, argv = args(task, root, root / f"{task}-{name}", *extra)
            assert task_command(command)(argv) == 0
    _, err = proc.communicate(timeout=300)
    logs = "".join(p.read_text()[-2000:] for p in sorted((root / "logs").glob("workerlog.*")))
    assert proc.returncode == 0, err[-2000:] + logs
    return root


def weights(run: Path) -> dict:
    import paddle

    return {k: v.numpy() for k, v in paddle.load(str(run / "last" / "model.pdparams")).items()}


def evaluations(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "evaluations.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_processes_train_the_weights_of_one(runs, task, layout):
    from conftest import assert_same_weights
    from helpers.rounding import adam_drift

    one, two = runs / f"{task}-one", runs / f"{task}-{layout}"
    atol = adam_drift(STEPS, LR)
    reference = weights(one)
    assert reference.keys() == weights(two).keys()
    heads = [name for name in reference if not name.startswith("ernie.")]
    assert heads  # the span head's own weights are among those compared
    for name, value in weights(two).items():
        np.testing.assert_allclose(value, reference[name], rtol=0, atol=atol, err_msg=name)
    assert_same_weights(one / "best", two / "best", atol=atol)
    # the comparison can fail: at half the lr, most tensors (every head's) end further away than rounding can explain
    control = weights(runs / f"{task}-half-lr")
    moved = [name for name in reference if not np.allclose(control[name], reference[name], rtol=0, atol=atol)]
    assert len(moved) > 0.8 * len(reference) and set(heads) <= set(moved), sorted(set(reference) - set(moved))

    log = (runs / "logs" / "workerlog.0").read_text()
    assert {"dp": "2 data-parallel processes", "tp": "mesh 1 data-parallel x 2 tensor-parallel"}[layout] in log
    if layout == "tp":  # the encoder's matrices were split (q/k/v/linear1 weights and biases, out_proj/linear2
        # weights: 10 a layer, 2 layers), the span heads replicated: equal weights are not two whole replicas'
        sharded = json.loads((two / "sharded.json").read_text())
        assert len(sharded) == 20 and all(name.startswith("ernie.encoder.layers.") for name in sharded), sharded
    # every dev sentence scored once: the same counts, and scores that may differ only where rounding flips a
    # borderline span (at most one entity or triple of the 19 entities and 7 triples)
    ours, theirs = evaluations(one), evaluations(two)
    assert [e["step"] for e in ours] == [e["step"] for e in theirs] == [2, 3]
    for a, b in zip(ours, theirs):
        assert a.get("support") == b.get("support")
        for key in a:
            if key.endswith("f1"):
                assert b[key] == pytest.approx(a[key], abs=0.1), key
