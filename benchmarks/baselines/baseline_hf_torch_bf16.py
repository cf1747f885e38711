"""HF transformers / PyTorch training as HF Trainer's ``--bf16`` runs it on CPU: ``../shared/bench``'s
``baseline_hf_torch.py`` (the same BERT, batches, AdamW and timing) under ``torch.autocast("cpu", torch.bfloat16)``.

    python benchmarks/baselines/baseline_hf_torch_bf16.py [baseline_hf_torch.py's flags]

The Trainer enters autocast around forward and loss; here it is entered around the whole loop, which computes the
same: autocast changes the dtype of forward ops only (backward ops follow their forward's, and AdamW's ops are
not cast), so matmuls run in bf16 with fp32 weights, gradients and optimizer state. Prints one JSON line, as
``baseline_hf_torch.py`` does, with ``"autocast": "bfloat16"`` added.
"""

import os
import sys

BENCH = os.environ.get(
    "ERNIE_FT_SHARED_BENCH",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "bench"),
)


def main() -> None:
    sys.path.insert(0, BENCH)
    import common  # noqa: E402 (../shared/bench, not a package)

    common.set_thread_env(common.parse_args("hf_torch").threads)  # before torch is imported, as the baseline does
    import baseline_hf_torch
    import torch

    report = common.report

    def report_bf16(args, stack, extra, *rest):  # the JSON line says it ran under autocast
        return report(args, stack, {**extra, "autocast": "bfloat16"}, *rest)

    common.report = report_bf16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        baseline_hf_torch.main()


if __name__ == "__main__":
    main()
