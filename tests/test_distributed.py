"""Data parallelism on CPU processes (gloo) against a single-process reference run."""
import subprocess
import sys

import numpy as np
import paddle
import pytest

from conftest import DATA
from ernie_ft.config import ParallelConfig


def train(out, *extra):
    args = [sys.executable, "-m", "ernie_ft.classify", "--train", str(DATA / "sentiment_train.tsv"),
            "--model", "scratch:tiny", "--epochs", "1", "--max-len", "48", "--dropout", "0", "--threads", "1",
            "--seed", "7", "--warmup", "0", "--stop-after-steps", "6", "--output", str(out), *extra]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return paddle.load(str(out / "last" / "model.pdparams"))


def test_two_processes_equal_one_process_with_the_same_global_batch(tmp_path):
    single = train(tmp_path / "single", "--batch-size", "8", "--lr", "2e-3")
    data_parallel = train(tmp_path / "dp", "--batch-size", "4", "--lr", "1e-3", "--nproc", "2")  # linear scaling
    assert single.keys() == data_parallel.keys()
    for name in single:
        np.testing.assert_allclose(data_parallel[name].numpy(), single[name].numpy(), rtol=0, atol=2e-5,
                                   err_msg=name)
    assert any(not np.allclose(single[n].numpy(), train(tmp_path / "other", "--batch-size", "8", "--lr", "1e-3")[n]
                               .numpy()) for n in single)  # the comparison can fail: lr 1e-3 unscaled differs
    logs = tmp_path / "dp" / "logs"
    assert (logs / "workerlog.0").is_file() and (logs / "workerlog.1").is_file()
    assert "lr 0.002 (--lr 0.001 scaled linear)" in (logs / "workerlog.0").read_text()
    assert not (logs / "workerlog.1").read_text().count("lr 0.002")  # only rank 0 reports and writes


@pytest.mark.parametrize("rule,replicas,accum,with_accum,factor", [
    ("linear", 4, 1, False, 4.0), ("linear", 4, 2, True, 8.0), ("linear", 4, 2, False, 4.0),
    ("sqrt", 4, 1, False, 2.0), ("sqrt", 2, 2, True, 2.0), ("none", 8, 4, True, 1.0),
])
def test_learning_rate_scaling_rules(rule, replicas, accum, with_accum, factor):
    config = ParallelConfig(lr_scaling=rule, scale_lr_with_accum=with_accum)
    assert config.lr_factor(replicas, accum) == pytest.approx(factor)
