"""What each process started by paddle.distributed.launch runs: the parent's command line.

The launcher's own argument parser would take flags such as ``--train`` for abbreviations of
its ``--trainers``, so the command travels in the environment instead of on the command line.
"""
import json
import os
import runpy
import sys

ARGV_VARIABLE = "ERNIE_FT_WORKER_ARGV"

if __name__ == "__main__":
    module, *args = json.loads(os.environ[ARGV_VARIABLE])
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
