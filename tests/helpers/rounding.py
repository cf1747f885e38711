"""How far float32 rounding lets runs on one process and on several drift apart, derived; and the one-step check.

A run split over processes adds the same numbers in another order, so its gradients differ from one process's
by rounding. One step's gradients are compared with a bound on that (``assert_same_gradients``); weights after
several AdamW steps with a bound on what those gradient differences can do to the updates (``adam_drift``).
"""

import subprocess
import sys
from pathlib import Path

import numpy as np

U = 2.0**-24  # float32's unit roundoff

# Weights after several AdamW steps. AdamW moves a weight by lr_t * m / (s + eps) (m: bias-corrected mean of its
# gradients, s: root of the bias-corrected mean of their squares). If two runs' gradients differ by rounding,
# |dg| <= delta at every step, then |dm| <= delta and |ds| <= delta (m is a weighted mean, s a weighted L2 norm), and
# a step differs by at most lr_t * delta * (1 + c/4) / eps: d/dm = 1/(s + eps) <= 1/eps, and
# |d/ds| = |m|/(s + eps)^2 <= c s/(s + eps)^2 <= c/(4 eps) with c = max |m|/s, which is at most the root of the
# largest ratio of Adam's two averaging weights, < 1.6 in the first 20 steps. Summed over the steps (lr_t <= lr: no
# warm-up, linear decay; clipping scales both runs' gradients alike, weight decay shrinks differences):
#     |dw| <= 1.5 * steps * lr * delta / eps.
# delta: the largest gradient difference (after clipping to norm 1) between one process and two that dp_step.py
# measures on the tests' data: 6.8e-8 data-parallel (classification), 2.4e-8 tensor-parallel, 7.7e-8 NER with a
# CRF; taken as 1e-7. Later steps also see the earlier steps' weight differences, a second-order effect: the final
# differences measured are 1.2e-7 (one float32 step of a LayerNorm weight near 1), 150 times under the bound.
# Paddle's default eps 1e-8 makes the bound 1.5 * 6 * 2e-3 * 1e-7 / 1e-8 = 0.18, as large as the training moves: a
# gradient that is pure rounding noise (the attention's key bias, to which the softmax is blind, has a true gradient
# of 0) becomes steps of up to lr, different in each run (1.2e-5 measured after 6 steps, against the former atol
# 2e-5, and more on other machines). Hence the tests' --adam-epsilon 1e-4: the bound is 1.8e-5 for 6 steps at lr
# 2e-3, while 1 process at the unscaled lr 1e-3 moves 39 of the 41 tensors by more (all but the two key biases).
ADAM_EPSILON, GRADIENT_ROUNDING = 1e-4, 1e-7


def adam_drift(steps: int, lr: float) -> float:
    """The most two runs' weights can drift apart through rounding in ``steps`` steps at ``lr`` (``ADAM_EPSILON``)."""
    return 1.5 * steps * lr * GRADIENT_ROUNDING / ADAM_EPSILON


def step_gradients(tmp_path: Path, *args) -> tuple:
    """dp_step.py with ``args`` run in one process (this one) and in two data-parallel ones: their two .npz files,
    loaded."""
    from helpers import dp_step

    script = str(Path(__file__).with_name("dp_step.py"))
    tmp_path.mkdir(parents=True, exist_ok=True)
    name, train, *numbers = args
    np.savez(tmp_path / "one.npz", **dp_step.step(name, str(train), *map(int, numbers))[0])
    args = [script, *map(str, args)]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "paddle.distributed.launch",
            "--log_dir",
            str(tmp_path / "logs"),
            "--nproc_per_node",
            "2",
            *args,
            str(tmp_path / "dp.npz"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:] + "".join(
        p.read_text()[-2000:] for p in sorted((tmp_path / "logs").glob("workerlog.*"))
    )
    return np.load(tmp_path / "one.npz"), np.load(tmp_path / "dp.npz")


def gradient_bound(one, key: str) -> float:
    """How far rounding can move the gradient ``key`` ("grad/NAME") of one process's run.

    Each gradient element is a float32 sum over the global batch's n token positions, which one process and the
    replicas add in different orders and groupings (each replica pads its own rows and its matmuls block
    differently, then the replicas' sums are averaged). Two orders of a sum of n terms differ by at most about
    2 n u sum|terms|. sum|terms| is dp_step.py's "terms/NAME" (exact over the token rows for a Linear's weight
    and bias, over the examples for the other tensors), taken at its largest over the tensor: errors flow in
    from other elements through the backward pass, and an elementwise bound is exceeded up to 17 times. The
    differences measured are 1 to 10 u sum|terms|, 50 times under this bound; a wrong split of the batch or a
    wrong average changes a gradient by about its own size, some 1e4 times the bound.
    """
    return 2 * int(one["tokens"]) * U * float(one["terms/" + key[5:]].max())


def assert_same_gradients(one, dp) -> None:
    """The replicas' averaged gradients equal one process's gradients of the whole global batch, up to rounding."""
    assert one["indices"].tolist() == dp["indices"].tolist()  # the replicas' rows make up the same global batch
    np.testing.assert_allclose(dp["loss"], one["loss"], rtol=2 * int(one["tokens"]) * U)  # a mean of positive terms
    assert one["stop"].tolist() == dp["stop"].tolist() == [True, False]  # the loss's reduction carries stop requests
    grads = sorted(k for k in one.files if k.startswith("grad/"))
    assert grads == sorted(k for k in dp.files if k.startswith("grad/")) and len(grads) > 10
    for key in grads:
        np.testing.assert_allclose(dp[key], one[key], rtol=0, atol=gradient_bound(one, key), err_msg=key)
