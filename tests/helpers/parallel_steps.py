"""tp_step.py's step on a 2-way tensor-parallel mesh, then dp_step.py's on 2 data-parallel replicas, in one job: one
launch for both of tests/test_distributed.py's step comparisons (the launcher and each process import Paddle,
seconds of CPU apiece).

    python -m paddle.distributed.launch --nproc_per_node 2 tests/helpers/parallel_steps.py OUT_DIR TASK TRAIN ...

TASK and what follows are dp_step.py's. Rank 0 writes OUT_DIR/tp.npz and OUT_DIR/dp.npz, as the two scripts write
their OUT.npz.
"""

import sys
from pathlib import Path

import dp_step  # beside this file, which Python runs as a script
import numpy as np
import tp_step

from ernie_ft.training.worker import leave

if __name__ == "__main__":
    out, (name, train, *numbers) = Path(sys.argv[1]), sys.argv[2:]
    tp, is_main = tp_step.step(2)
    dp, _ = dp_step.step(name, train, *map(int, numbers))
    if is_main:
        np.savez(out / "tp.npz", **tp)
        np.savez(out / "dp.npz", **dp)
    leave(0)  # as launched ernie_ft workers end: without the teardown that races Paddle's TCPStore thread
