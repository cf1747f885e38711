"""What every command's parser shares: the ``Parser`` that answers a wrong flag with the right one, and
flags generated from a dataclass's fields and the docstrings under them.

A new setting is one dataclass field with a docstring; it becomes a flag (and, for the run config, a
recipe key). Nothing here imports paddle, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys

from ernie_ft.recipes import field_docs, flag_name, suggest, type_name

# Spellings of other toolkits (HF transformers' TrainingArguments, PaddleNLP's examples) -> ernie_ft's flag,
# keyed with hyphens (``--learning_rate`` is looked up as ``--learning-rate``). They stay errors rather than
# aliases: one name per setting, the same on the command line and in a recipe, and a few of them mean
# something else here (--lr is per device and scaled with the replicas). A user's own flag spelled with underscores
# is told its hyphenated name the same way; an old name a command still takes (help hidden) is never suggested.
OTHER_SPELLINGS = {
    "--learning-rate": "--lr",
    "--num-train-epochs": "--epochs",
    "--num-epochs": "--epochs",
    "--per-device-train-batch-size": "--batch-size",
    "--per-device-eval-batch-size": "--batch-size",
    "--train-batch-size": "--batch-size",
    "--max-seq-length": "--max-len",
    "--max-seq-len": "--max-len",
    "--max-length": "--max-len",
    "--output-dir": "--output",
    "--model-name-or-path": "--model",
    "--model-name": "--model",
    "--warmup-ratio": "--warmup",
    "--warmup-proportion": "--warmup",
    "--gradient-accumulation-steps": "--grad-accum",
    "--logging-steps": "--log-steps",
    "--early-stopping-patience": "--patience",
    "--metric-for-best-model": "--metric",
    "--gradient-checkpointing": "--recompute",
    "--fp16": "--amp fp16",
    "--bf16": "--amp bf16",
    "--train-file": "--train",
    "--validation-file": "--dev",
    "--test-file": "--test",
    "--resume-from-checkpoint": "--resume",
    "--overwrite-output-dir": "--overwrite",
}


class Parser(argparse.ArgumentParser):
    """argparse that names the right flag for a wrong one and exits with status 2: a flag the command leaves
    out on purpose (``inapplicable``: flag -> the reason), another toolkit's spelling (``OTHER_SPELLINGS``) or
    an underscored spelling of a flag it has, or else the closest flag to a typo."""

    inapplicable: dict = {}

    def error(self, message):
        if message.startswith("unrecognized arguments:"):
            flags = [a.split("=")[0] for a in message.split(":", 1)[1].split() if a.startswith("-")]
            known = [s for a in self._actions if a.help != argparse.SUPPRESS for s in a.option_strings if s[:2] == "--"]
            ours = {flag: self.our_name(flag, known) for flag in flags}
            renamed = [flag for flag in flags if ours[flag]]
            if flags and flags[0] in self.inapplicable:
                message = f"{flags[0]} does not apply to {self.prog} ({self.inapplicable[flags[0]]}). See --help."
            elif flags and ours[flags[0]]:
                them = "it" if len(renamed) == 1 else "them"
                message = (
                    f"unknown flag{'s' * (len(renamed) > 1)} {', '.join(renamed)}; ernie_ft calls {them} "
                    f"{', '.join(ours[flag] for flag in renamed)}. See --help."
                )
            elif flags:
                message = f"unknown flag {flags[0]}.{suggest(flags[0], known)} See --help."
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")

    @staticmethod
    def our_name(flag: str, known: list[str]) -> str | None:
        """This parser's flag for ``flag`` as another toolkit or an underscore spells it, or None."""
        hyphens = flag.replace("_", "-")
        ours = hyphens if hyphens in known else OTHER_SPELLINGS.get(hyphens)
        return ours if ours and ours.split()[0] in known else None


def add_field_flags(group, cls, fields=None, typed: bool = False) -> None:
    """A flag for each of ``cls``'s dataclass ``fields`` (default: all), its help the docstring under the field.

    ``typed=False`` (the run config): values stay strings and absent flags absent, for ``build_config`` to check
    and merge with a recipe. ``typed=True``: each flag parses to its field's type and defaults to its default.
    """
    docs = field_docs(cls)
    for f in dataclasses.fields(cls) if fields is None else fields:
        default = f.default if f.default is not dataclasses.MISSING else None
        help_text = _help(docs.get(f.name, ""), cls) + (f" (default: {default})" if default not in (None, "") else "")
        help_text = help_text.replace("%", "%%")  # argparse formats help
        if type_name(f) in ("bool", "Optional[bool]"):  # Optional: --header, --no-header or neither
            group.add_argument(flag_name(f.name), action=argparse.BooleanOptionalAction, help=help_text)
        elif typed:
            group.add_argument(
                flag_name(f.name), type=str if default is None else type(default), default=default, help=help_text
            )
        else:
            group.add_argument(flag_name(f.name), metavar=f.name.upper(), help=help_text)


def _help(doc: str, cls) -> str:
    """A field docstring as help: ````name```` of another field becomes its flag, of a constant of the class's
    module that constant's value."""
    names = {f.name for f in dataclasses.fields(cls)}
    constants = vars(sys.modules[cls.__module__])

    def plain(match):
        name = match.group(1)
        if name in names:
            return flag_name(name)
        value = constants.get(name)
        return str(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else name

    return re.sub(r"``([^`]+)``", plain, doc)
