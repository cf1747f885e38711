"""``python -m ernie_ft TASK ...``: run a built-in task by name or a custom one with --task.

    python -m ernie_ft classify --train ... (same as python -m ernie_ft.classify)
    python -m ernie_ft --task tasks/multilabel_intent.py:MultiLabelIntent --train ...
    python -m ernie_ft predict --model DIR --input FILE (any task)
"""
from __future__ import annotations

import sys

from .cli import run_cli
from .errors import UserError
from .task import BUILTIN, resolve_task


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "predict":  # the checkpoint names its task
        return run_cli(None, "python -m ernie_ft", "", argv)
    if argv and argv[0] in BUILTIN:
        spec, argv = argv[0], argv[1:]
    elif "--task" in argv:
        at = argv.index("--task")
        if at + 1 >= len(argv):
            print("error: --task needs a value: a built-in name or module:Class / file.py:Class", file=sys.stderr)
            return 2
        spec = argv[at + 1]
        argv = argv[:at] + argv[at + 2:]
    else:
        print(__doc__, file=sys.stderr)
        print(f"built-in tasks: {', '.join(BUILTIN)}", file=sys.stderr)
        return 2
    try:
        task_cls = resolve_task(spec)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return run_cli(task_cls, f"python -m ernie_ft {spec}", f"Fine-tune ERNIE for the task {spec}.", argv,
                   module=["ernie_ft", spec] if spec in BUILTIN else ["ernie_ft", "--task", spec], task_name=spec)


if __name__ == "__main__":
    sys.exit(main())
