"""What the server accepts and how it batches: every limit is a ``serve`` flag (``--max-batch-size``...)."""

from dataclasses import asdict, dataclass

from ernie_ft.errors import UserError

CPU_FORWARD_BATCH = {"dygraph": 16, "inference": 16, "onnxruntime": 4, "onnxruntime-int8": 4}
"""Windows per forward pass on a CPU, per engine: the fastest per window of 1-32 for nano (``bench_serve.py
--model-only``: Paddle 9.8 ms per window in passes of 16, 16.3 alone; int8 ONNX Runtime 5.8-6.0 ms in passes of
1-4, 7.2 in passes of 16)."""


@dataclass(frozen=True)
class Limits:
    max_batch_size: int = 32
    """Most windows in one dynamic batch (the windows of the requests that run together)."""
    forward_batch_size: int = 0
    """Most windows in one forward pass: a dynamic batch runs as passes of this size, sorted by length
    (0: on a CPU 16 with Paddle, 4 with ONNX Runtime; ``max_batch_size`` on a GPU)."""
    max_wait_ms: float = 5.0
    """How long the first queued request waits for others to share its batch (only while other requests are
    being read: a request alone runs at once)."""
    max_queue: int = 256
    """Most requests waiting for the model; more get 503."""
    max_inputs: int = 64
    """Most inputs in one request."""
    max_chars: int = 20_000
    """Longest text field, in characters (long texts are cut into windows, as in predict)."""
    max_body_bytes: int = 1_000_000
    """Largest request body."""
    training_queue: int = 4
    """Label Studio's Start training: most runs waiting behind the one that trains (one trains at a time); more are
    answered "already training"."""
    keep_runs: int = 5
    """Label Studio's Start training: run directories kept on disk, the newest (and the served model's)."""
    min_dev_tasks: int = 20
    """Label Studio's Start training: fewest held-out tasks that decide a swap; with fewer the new model stays on
    disk, not swapped in."""

    def check(self) -> None:
        for name, value in asdict(self).items():
            if value < 0 or value == 0 and name not in ("max_wait_ms", "forward_batch_size", "training_queue"):
                raise UserError(f"--{name.replace('_', '-')} must be positive, not {value}")
