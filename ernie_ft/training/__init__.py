"""The training loop and what it stands on: devices, parallelism, process launch, checkpoints, run logs."""
