"""One forward/backward of the first global batch of a training file, in one process or as data-parallel replicas.

    python tests/helpers/dp_step.py TASK TRAIN GLOBAL_BATCH MAX_LEN SEED OUT.npz      # one process
    python -m paddle.distributed.launch --nproc_per_node 2 tests/helpers/dp_step.py TASK TRAIN ...

or ``step(TASK, TRAIN, GLOBAL_BATCH, MAX_LEN, SEED)`` called in a test's own (single) process.

TASK is ``classify`` or ``ner-crf``. The data, the split of the global batch over the replicas,
the model, its loss and the gradient averaging are the library's (``dataset``, ``LengthGroupedSampler``,
``modeling``, the task, ``parallel.Parallel``), as in ``trainer.train_step``; nothing is stepped.
Rank 0 writes every parameter's gradient ("grad/NAME", averaged over the replicas), the loss
(mean over replicas), whether a stop asked for by the last rank alone and by no rank reached it
("stop"), the global batch's feature indices as every rank fed them, and the number of token
positions the global batch sums over. One process also writes "terms/NAME": the
elementwise mean over the batch's examples of |that example's own gradient|, for rounding bounds.
"""

import sys

import numpy as np
import paddle

from ernie_ft.classify.task import Classification
from ernie_ft.config import DataConfig, ModelConfig
from ernie_ft.data.batching import LengthGroupedSampler, collate
from ernie_ft.data.dataset import default_cache_dir, featurize, read_splits
from ernie_ft.models.modeling import build_model, forward, load_pipeline, to_tensors
from ernie_ft.ner.task import NER
from ernie_ft.training.parallel import Parallel
from ernie_ft.training.runtime import seed_everything, set_threads
from ernie_ft.training.worker import leave

TASKS = {"classify": Classification, "ner-crf": lambda: NER(crf=True)}


def step(name: str, train: str, global_batch: int, max_len: int, seed: int) -> tuple[dict, bool]:
    """(what rank 0 writes, whether this process is rank 0) for one step of TASK on this job's processes."""
    task = TASKS[name]()
    parallel = Parallel(1)
    set_threads(1, parallel.size)
    data = DataConfig(train=train, max_len=max_len, cache_dir=default_cache_dir())
    examples, labels = read_splits(task, data)
    pipeline = load_pipeline(ModelConfig(), data, lambda: task.texts(examples["train"]), exact_spans=False)
    seed_everything(seed)
    model = build_model(ModelConfig(dropout=0.0), task.head, len(labels), pipeline, getattr(task, "model_class", None))
    if hasattr(task, "bind"):
        task.bind(model)
    model, _ = parallel.prepare(
        model,  # the optimizer is never stepped
        lambda net: paddle.optimizer.SGD(learning_rate=0.0, parameters=net.parameters()),
    )
    net = parallel.unwrap(model)
    split = featurize(task, "train", examples["train"], pipeline, labels, data)
    per_replica = global_batch // parallel.dp
    sampler = LengthGroupedSampler(
        split.lengths, per_replica, seed=seed, num_replicas=parallel.dp, rank=parallel.data_rank
    )
    mine = next(b for b in sampler.batches(0) if len(b) == per_replica)  # one process keeps a partial tail batch

    def batch_of(indices):
        return parallel.distribute(
            to_tensors(collate([split.features[i] for i in indices], pipeline.pad_id, task.head == "token"))
        )

    rows, hooks = {}, []  # one process: each Linear's input and output gradient over the global batch's token rows
    if parallel.size == 1:

        def keep_rows(layer, inputs, output):
            rows[layer] = [inputs[0].numpy().reshape(-1, layer.weight.shape[0])]
            output.register_hook(lambda grad: rows[layer].append(grad.numpy().reshape(-1, layer.weight.shape[1])))

        hooks = [
            layer.register_forward_post_hook(keep_rows)
            for layer in net.sublayers()
            if isinstance(layer, paddle.nn.Linear)
        ]
    batch = batch_of(mine)
    loss = task.loss(forward(model, batch), batch)
    loss.backward()
    mean, stop = parallel.mean_and_any(loss, parallel.rank == parallel.size - 1)  # the last rank asks to stop
    _, go_on = parallel.mean_and_any(loss, False)
    result = {
        "loss": np.float64(mean),
        "stop": np.array([stop, go_on]),
        "tokens": np.int64(parallel.job_total(batch["input_ids"].size)),
        "indices": np.concatenate(parallel.all_gather(np.array(mine))),
    }
    result.update({"grad/" + n: p.grad.numpy() for n, p in net.named_parameters() if p.grad is not None})
    if parallel.size == 1:
        # Each gradient element is a float32 sum of terms; "terms/NAME" is, per element, the larger of two
        # lower bounds of the sum of their magnitudes: sum over the batch's examples of |that example's own
        # gradient| (divided by the batch, as the loss is a mean), and for a Linear the sum over the token
        # rows of |x| |dy| (weight) or |dy| (bias), which catches cancellation inside an example (the
        # attention's key bias has a true gradient of 0: every example's own gradient is rounding noise).
        terms = {n: np.zeros(p.shape, dtype="float64") for n, p in net.named_parameters()}
        names = {id(p): n for n, p in net.named_parameters()}
        for layer, (x, *dy) in rows.items():
            if not dy:  # no gradient reached it (the pooler of a token classifier)
                continue
            dy = dy[0]
            terms[names[id(layer.weight)]] = np.abs(x).T.astype("float64") @ np.abs(dy)
            terms[names[id(layer.bias)]] = np.abs(dy).sum(axis=0, dtype="float64")
        for hook in hooks:
            hook.remove()
        per_example = {n: np.zeros(p.shape, dtype="float64") for n, p in net.named_parameters()}
        for i in mine:
            net.clear_gradients()
            one = batch_of([i])
            task.loss(forward(net, one), one).backward()
            for n, p in net.named_parameters():
                if p.grad is not None:
                    per_example[n] += np.abs(p.grad.numpy()) / len(mine)
        result.update({"terms/" + n: np.maximum(terms[n], per_example[n]) for n in per_example})
    return result, parallel.is_main


if __name__ == "__main__":
    name, train, global_batch, max_len, seed, out = sys.argv[1:7]
    result, is_main = step(name, train, int(global_batch), int(max_len), int(seed))
    if is_main:
        np.savez(out, **result)
    leave(0)  # as launched ernie_ft workers end: without the teardown that races Paddle's TCPStore thread
