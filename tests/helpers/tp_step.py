"""One forward/backward of a small ERNIE classifier, split by ernie_ft's tensor-parallel plan or not.

    python tests/helpers/tp_step.py OUT.npz                 # single process
    python -m paddle.distributed.launch --nproc_per_node 2 tests/helpers/tp_step.py OUT.npz 2

or ``step(1)`` called in a test's own (single) process. Rank 0 writes the logits, the loss and every
parameter's gradient, gathered to full tensors.
"""

import sys

import numpy as np
import paddle
from paddlenlp.transformers import ErnieConfig, ErnieForSequenceClassification

from ernie_ft.models.modeling import forward
from ernie_ft.training.parallel import Parallel
from ernie_ft.training.worker import leave


def step(tensor_parallel: int) -> tuple[dict, bool]:
    """(what rank 0 writes, whether this process is rank 0) for this job's processes, ``tensor_parallel`` wide."""
    parallel = Parallel(tensor_parallel)
    paddle.seed(3)
    config = ErnieConfig(
        vocab_size=120,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        type_vocab_size=4,
        use_task_id=False,
        num_labels=3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model, _ = parallel.prepare(
        ErnieForSequenceClassification(config),  # the optimizer is never stepped
        lambda net: paddle.optimizer.SGD(learning_rate=0.0, parameters=net.parameters()),
    )
    model = parallel.unwrap(model)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 120, (4, 10))
    ids[:, 7:] = 0  # padding
    batch = {
        "input_ids": paddle.to_tensor(ids),
        "token_type_ids": paddle.to_tensor(np.zeros_like(ids)),
        "labels": paddle.to_tensor(rng.integers(0, 3, (4,))),
    }
    batch = parallel.distribute(batch)
    logits = forward(model, batch)
    loss = paddle.nn.functional.cross_entropy(logits, batch["labels"])
    loss.backward()
    result = {"logits": parallel.dense(logits).numpy(), "loss": parallel.dense(loss).numpy()}
    result.update({"grad/" + n: parallel.dense(p.grad).numpy() for n, p in model.named_parameters()})
    sharded = [n for n, p in model.named_parameters() if p.is_dist() and "Shard" in str(p.placements)]
    return {"sharded": np.array(sharded), **result}, parallel.is_main


if __name__ == "__main__":
    result, is_main = step(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    if is_main:
        np.savez(sys.argv[1], **result)
    leave(0)  # as launched ernie_ft workers end: without the teardown that races Paddle's TCPStore thread
