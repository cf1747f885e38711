"""Run ``python -m ernie_ft ARGS`` in this process, dying like SIGKILL at a point of the second save of last/.

    python tests/helpers/crash_run.py CRASH ARGS...      CRASH: writing | between-renames | before-cleanup

``os._exit`` ends the process at once: no ``finally``, no handler, no flush, as a SIGKILL would. The first
save of last/ (end of epoch 1) completes; the second (end of epoch 2) dies at CRASH: after the model file
was written into last.tmp, between the rename of last to last.old and of last.tmp to last, or after both
renames, before last.old is removed.
"""

import os
import shutil
import sys

import paddle

from ernie_ft.cli import main

crash, args = sys.argv[1], sys.argv[2:]
save, rename, rmtree = paddle.save, os.rename, shutil.rmtree
saves, renames = [], []


def dying_save(obj, path, *a, **k):
    saves.append(path)
    if crash == "writing" and len(saves) == 4:  # the second save: model.pdparams written, optimizer not
        os._exit(137)
    return save(obj, path, *a, **k)


def dying_rename(src, dst):
    renames.append(dst)
    if crash == "between-renames" and len(renames) == 3:  # last -> last.old done, last.tmp -> last not
        os._exit(137)
    return rename(src, dst)


def dying_rmtree(path, *a, **k):
    if crash == "before-cleanup" and str(path).endswith("last.old") and os.path.isdir(path):
        os._exit(137)
    return rmtree(path, *a, **k)


paddle.save, os.rename, shutil.rmtree = dying_save, dying_rename, dying_rmtree
sys.exit(main(args))
