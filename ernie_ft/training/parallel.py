"""The processes of one job as one object, so the trainer never asks which kind of parallelism runs.

One process, ``paddle.DataParallel`` replicas (each rank feeds its slice of the global batch,
gradients averaged), or a ``dp x mp`` mesh of Paddle's auto-parallel API (matrices split by
``TENSOR_PARALLEL_PLAN``, every rank builds the global batch and the mesh splits it over "dp").
The trainer calls ``prepare`` once, then ``distribute`` per batch, ``mean`` for the logged loss,
``share``/``gather`` to score each evaluation example once, and ``full_state``/``shard_like``
around checkpoints, the way accelerate's ``prepare`` and ``gather_for_metrics`` hide the setup.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Callable

import numpy as np
import paddle

from ernie_ft.errors import UserError

# Tensor-parallel plan: layer-name patterns -> how the layer's Linear is split across the "mp" axis.
# Column: the output features are split (q/k/v and the first feed-forward matrix, so attention heads
# and FFN units are local); row: the input features are split and the outputs summed (out_proj and
# the second feed-forward matrix). Everything else (embeddings, LayerNorm, heads) is replicated.
TENSOR_PARALLEL_PLAN = {
    r"\.self_attn\.(q_proj|k_proj|v_proj)$": "column",
    r"\.linear1$": "column",
    r"\.self_attn\.out_proj$": "row",
    r"\.linear2$": "row",
}


def world() -> tuple[int, int]:
    """(rank, number of processes) of this job; (0, 1) outside paddle.distributed.launch."""
    return int(os.environ.get("PADDLE_TRAINER_ID", 0)), int(os.environ.get("PADDLE_TRAINERS_NUM", 1))


class Parallel:
    """This job's processes: data-parallel replicas of tensor-parallel groups (``tensor_parallel`` wide)."""

    def __init__(self, tensor_parallel: int = 1):
        self.rank, self.size = world()
        self.is_main = self.rank == 0
        self.mp = tensor_parallel
        if self.size % self.mp:
            raise UserError(
                f"--tensor-parallel {self.mp} must divide the number of processes ({self.size}); "
                f"start them with --nproc N (CPU) or --gpus 0,1,... (a multiple of {self.mp})"
            )
        self.dp = self.size // self.mp
        self.dp_rank = self.rank // self.mp  # the mesh is row-major: rank r sits at (r // mp, r % mp)
        self.mesh = None
        if self.size > 1:
            import paddle.distributed as dist

            dist.init_parallel_env()
            if self.mp > 1:
                ranks = np.arange(self.size).reshape(self.dp, self.mp).tolist()
                self.mesh = dist.ProcessMesh(ranks, dim_names=["dp", "mp"])

    @property
    def data_rank(self) -> int | None:
        """Which slice of each global batch this rank feeds; None: the whole batch (a mesh splits it)."""
        return None if self.mesh is not None else self.dp_rank

    def describe(self) -> str:
        if self.mesh is not None:
            return f"mesh {self.dp} data-parallel x {self.mp} tensor-parallel"
        return f"{self.size} data-parallel processes" if self.size > 1 else "1 process"

    def check_model(self, model) -> None:
        """UserError when the model's heads or feed-forward width do not split into ``mp`` parts."""
        if self.mp == 1:
            return
        for name in ("num_attention_heads", "intermediate_size"):
            value = getattr(model.config, name)
            if value % self.mp:
                raise UserError(
                    f"--tensor-parallel {self.mp}: the model has {name} = {value}, which does not "
                    f"split into {self.mp} equal parts; choose a divisor"
                )

    # --- setting up ------------------------------------------------------------------------
    def prepare(self, model, make_optimizer: Callable, precision=None, recompute: bool = False):
        """(model to train, optimizer): the model laid out for this job, its optimizer built over the
        parameters that result. ``unwrap`` gives back the bare model (to save or evaluate).

        On one process or plain replicas the CPU layers of ``kernels`` are swapped in (the mesh
        keeps Paddle's, which propagate placements); ``recompute`` recomputes each encoder layer
        in the backward pass; ``precision`` may keep O2 weights in low precision.
        """
        from ernie_ft.models.fast_layers import enable_fast_kernels
        from ernie_ft.training.runtime import enable_recompute

        if self.mesh is None:
            enable_fast_kernels(model)
        if recompute:
            enable_recompute(model)
        if self.mesh is not None:
            import paddle.distributed as dist

            model = dist.shard_layer(model, self.mesh, functools.partial(self._shard, {}))
        optimizer = make_optimizer(model)
        if self.mesh is not None:
            import paddle.distributed as dist

            optimizer = dist.shard_optimizer(optimizer)  # state laid out like the parameters it updates
        if precision is not None:
            model, optimizer = precision.prepare(model, optimizer)
        if self.size > 1 and self.mesh is None:  # on a mesh Paddle averages the gradients itself
            model = paddle.DataParallel(model)
        return model, optimizer

    @staticmethod
    def unwrap(model):
        """The bare model inside a ``prepare``d one."""
        return model._layers if isinstance(model, paddle.DataParallel) else model

    @staticmethod
    def _shard(sharded: dict, name: str, layer, mesh) -> None:
        """Lay out ``layer``'s own parameters by the plan; ``sharded`` (id -> (parameter, dist tensor), the
        parameter kept so that ids stay unique) keeps a tied parameter tied: an MLM head's projection is
        the word embeddings, and two dist tensors of it would train apart."""
        import paddle.distributed as dist

        split = next((how for pattern, how in TENSOR_PARALLEL_PLAN.items() if re.search(pattern, name)), None)
        for key, param in list(layer.named_parameters(include_sublayers=False)):
            if id(param) in sharded:
                setattr(layer, key, sharded[id(param)][1])
                continue
            on_mp = dist.Replicate()
            if split == "column":
                on_mp = dist.Shard(1 if key == "weight" else 0)  # paddle Linear weights are [in, out]
            elif split == "row" and key == "weight":
                on_mp = dist.Shard(0)
            sharded[id(param)] = (param, dist.shard_tensor(param, mesh, [dist.Replicate(), on_mp]))
            setattr(layer, key, sharded[id(param)][1])

    # --- per batch -------------------------------------------------------------------------
    def distribute(self, batch: dict, split: bool = True, whole: tuple = ()) -> dict:
        """Tensors for the model: on a mesh, dist tensors split over "dp" (``split``) or replicated.

        The entries named in ``whole`` are not indexed by row (pretraining's flat masked positions
        index the global batch): they stay whole on every rank, and Paddle's global view of the
        tensors gathers what they point at. Positions are passed explicitly on a mesh: PaddleNLP's
        ERNIE derives them with ops that do not propagate the batch's placements.
        """
        if self.mesh is None:
            return batch
        import paddle.distributed as dist

        ids = batch["input_ids"]
        batch = {**batch, "position_ids": paddle.arange(ids.shape[1], dtype="int64").expand_as(ids)}
        rows = [dist.Shard(0) if split and self.dp > 1 else dist.Replicate(), dist.Replicate()]
        replicated = [dist.Replicate(), dist.Replicate()]
        return {k: dist.shard_tensor(v, self.mesh, replicated if k in whole else rows) for k, v in batch.items()}

    def dense(self, tensor):
        """A full (gathered) tensor from a parameter, optimizer state or output; a collective on a mesh."""
        import paddle.distributed as dist

        if self.mesh is not None and getattr(tensor, "is_dist", lambda: False)():
            return dist.unshard_dtensor(tensor)
        return tensor

    def mean_and_any(self, value, flag: bool) -> tuple[float, bool]:
        """The mean over data-parallel replicas of a scalar tensor (a step's loss) and whether ``flag`` (a stop
        request) is set on any rank: one collective for both, which every rank calls each step."""
        if self.size == 1:
            return float(value), flag
        import paddle
        import paddle.distributed as dist

        if self.mesh is not None:  # the loss is already the global batch's: only the flag is reduced
            stops = paddle.to_tensor([float(flag)])
            dist.all_reduce(stops)
            return float(value), stops.item() > 0
        both = paddle.concat([value.detach().astype("float32").reshape([1]), paddle.to_tensor([float(flag)])])
        dist.all_reduce(both)  # sums: the replicas' losses and the number of ranks asking to stop
        total, stops = both.tolist()
        return total / self.size, stops > 0

    def job_total(self, count: int) -> int:
        """The whole job's count (tokens in a step) from this rank's: every replica feeds its own slice."""
        return count if self.mesh is not None else count * self.size

    # --- evaluation ------------------------------------------------------------------------
    def share(self, n: int) -> list[int]:
        """Indices of the ``n`` examples this rank scores (all of them on a mesh: the matrices are split)."""
        return list(range(n)) if self.mesh is not None else list(range(self.rank, n, self.size))

    def gather(self, indices: list[int], outputs: list) -> list:
        """Every example's output in order, on every rank, from each rank's (``share``, outputs)."""
        parts = [(indices, outputs)] if self.mesh is not None else self.all_gather((indices, list(outputs)))
        merged = [None] * sum(len(part) for part, _ in parts)
        for part, values in parts:
            for i, value in zip(part, values):
                merged[i] = value
        return merged

    def all_gather(self, value) -> list:
        """Every rank's ``value`` (any picklable object), in rank order, on every rank."""
        if self.size == 1:
            return [value]
        import paddle.distributed as dist

        values: list = []
        dist.all_gather_object(values, value)
        return values

    def from_main(self, load: Callable[[], object]):
        """``load()``'s value (anything picklable, paddle Tensors included) as rank 0 computes it, on every rank;
        call on every rank. Rank 0 alone reads the files, so ranks on nodes that cannot read its output directory (no
        shared filesystem) still get its checkpoints; the value travels pickled over the process group."""
        if self.size == 1:
            return load()
        import paddle.distributed as dist

        box = [load() if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.size > 1:
            import paddle.distributed as dist

            dist.barrier()

    # --- checkpoints -----------------------------------------------------------------------
    def full_state(self, state: dict) -> dict:
        """A state dict (nested) with every sharded tensor gathered; call on every rank."""
        if self.mesh is None:
            return state
        return {k: self.full_state(v) if isinstance(v, dict) else self.dense(v) for k, v in state.items()}

    def shard_like(self, state: dict, model) -> dict:
        """Full weights (a checkpoint's state dict) laid out like ``model``'s parameters; other entries replicated."""
        if self.mesh is None:
            return state
        import paddle.distributed as dist

        params = dict(model.named_parameters())
        replicated = [dist.Replicate(), dist.Replicate()]
        return {
            k: dist.shard_tensor(v, params[k].process_mesh, params[k].placements)
            if k in params
            else dist.shard_tensor(v, self.mesh, replicated)
            for k, v in state.items()
        }
