"""A run's resumable state in ``OUTPUT/last``: weights, optimizer, schedule, loss scaler, random state and data
position, written by every rank's collectives and the main rank's files (``save_state``) and read back on every rank
(``load_state``). Written through ``checkpoint.write_atomically``, so an interrupted save leaves the previous one."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle

from ernie_ft.training.checkpoint import write_atomically


def _rename_optimizer_state(state: dict, names: dict) -> dict:
    """Re-key optimizer state from one set of parameter names to another.

    Paddle names accumulators after a process-global parameter counter ("embedding_9.w_0_moment1_0"),
    which differs between two builds of the same model; checkpoints use the structured names
    ("ernie.embeddings.word_embeddings.weight") so a new process, or a new model in the same
    process, can load them.
    """
    prefixes = sorted(names, key=len, reverse=True)
    renamed = {}
    for key, value in state.items():
        if isinstance(value, dict):
            renamed[key] = _rename_optimizer_state(value, names)
            continue
        old = next((p for p in prefixes if key == p or key.startswith(p + "_")), None)
        renamed[key if old is None else names[old] + key[len(old) :]] = value
    return renamed


def save_state(path: str, state: dict, parallel) -> None:
    """Write a run's whole ``state`` (see ``run.Run.state``) and the random state to ``path``.

    Every rank calls it (sharded tensors are gathered), the main one writes: full tensors, so
    any number of processes can resume from them.
    """
    import paddle

    from ernie_ft.training.runtime import rng_state

    model, optimizer = state["model"], state["optimizer"]
    model_state = parallel.full_state(model.state_dict())  # collectives on a mesh: every rank takes part
    optimizer_state = parallel.full_state(optimizer.state_dict())
    if not parallel.is_main:
        return
    to_structured = {p.name: n for n, p in model.named_parameters()}

    def write(tmp):
        paddle.save(model_state, os.path.join(tmp, "model.pdparams"))
        paddle.save(_rename_optimizer_state(optimizer_state, to_structured), os.path.join(tmp, "optimizer.pdopt"))
        with open(os.path.join(tmp, "extra.pkl"), "wb") as f:
            pickle.dump(
                {
                    "scheduler": state["scheduler"].state_dict(),
                    "scaler": state["precision"].state_dict(),
                    "rng": rng_state(),
                },
                f,
            )
        with open(os.path.join(tmp, "trainer_state.json"), "w", encoding="utf-8") as f:
            json.dump(dataclasses.asdict(state["progress"]), f, ensure_ascii=False, indent=1)

    write_atomically(path, write)


def batch_mismatch(was: int, global_batch: int, dp: int) -> str | None:
    """The --resume error when the saved run's global batch ``was`` is not this run's ``global_batch`` (``dp``
    data-parallel replicas): the data position and the schedule would not match. None when they are equal."""
    if was == global_batch:
        return None
    hint = (
        f"pass --batch-size {was // dp}"
        if was % dp == 0
        else f"use a number of data-parallel replicas that divides {was}"
    )
    return (
        f"--resume: the run used a global batch of {was}, this one has {global_batch} "
        f"(--batch-size {global_batch // dp} x {dp} replicas); {hint}"
    )


def saved_global_batch(path: str) -> int | None:
    """The global batch of the state at ``path`` (its progress file alone), or None when it cannot be read here (a
    node without the files receives them from rank 0; the ranks name what is wrong with a damaged one)."""
    try:
        with open(os.path.join(path, "trainer_state.json"), encoding="utf-8") as f:
            return int(json.load(f)["global_batch"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_state(path: str, state: dict, parallel) -> dict:
    """Restore ``state``'s model, optimizer, schedule and scaler in place, and the random state;
    returns the saved progress (a dict).

    The full weights are laid out like the model's (sharded) parameters; the optimizer takes
    full tensors (a sharded optimizer splits its state as it creates it). Call on every rank: rank 0 reads ``path``,
    the others receive what it read, so their node needs no copy of it.
    """
    from ernie_ft.training.runtime import set_rng_state

    saved = parallel.from_main(lambda: _read_state(path))  # rank 0 reads; a node without its files receives them
    model, optimizer = state["model"], state["optimizer"]
    model.set_state_dict(parallel.shard_like(saved["model"], model))
    to_runtime = {n: p.name for n, p in model.named_parameters()}
    optimizer.set_state_dict(_rename_optimizer_state(saved["optimizer"], to_runtime))
    state["scheduler"].set_state_dict(saved["extra"]["scheduler"])
    state["precision"].load_state_dict(saved["extra"]["scaler"])
    set_rng_state(saved["extra"]["rng"])
    return saved["progress"]


def _read_state(path: str) -> dict:
    """What ``save_state`` wrote to ``path``: the model's and the optimizer's state (tensors), the extra state and
    the progress."""
    import paddle

    with open(os.path.join(path, "extra.pkl"), "rb") as f:
        extra = pickle.load(f)
    with open(os.path.join(path, "trainer_state.json"), encoding="utf-8") as f:
        progress = json.load(f)
    return {
        "model": paddle.load(os.path.join(path, "model.pdparams")),
        "optimizer": paddle.load(os.path.join(path, "optimizer.pdopt")),
        "extra": extra,
        "progress": progress,
    }
