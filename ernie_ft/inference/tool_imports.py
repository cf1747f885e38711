"""The annotation tools' imports ``predict --format label-studio|doccano`` and ``select`` write: each answer made into
a Label Studio task or a doccano record (``data.pre_annotations``), in the names of the project's labelling config
when ``--label-config`` gives one (``data.label_config``)."""

from __future__ import annotations

from typing import Optional

from ernie_ft.errors import UserError

LABEL_CONFIG = "--label-config"


def read_label_config(path: Optional[str], fmt: str) -> Optional[str]:
    """The labelling config XML in the file ``path`` (None: none given) for an import of ``fmt``; a UserError when
    it cannot be read or ``fmt`` is not Label Studio's."""
    if path is None:
        return None
    if fmt != "label-studio":
        why = (
            "doccano's import takes the text and label column names as its own settings (Column Data, Column Label)"
            if fmt == "doccano"
            else "the answers are no import"
        )
        raise UserError(f"{LABEL_CONFIG} is a Label Studio labelling config, for --format label-studio; {why}")
    try:
        with open(path, encoding="utf-8-sig") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{LABEL_CONFIG} {path}: cannot be read ({e}); give the XML of the project's labelling "
                        "interface (Settings > Labeling Interface > Code in Label Studio)") from None  # fmt: skip


class ToolImport:
    """Makes the ``loaded`` checkpoint's answers into ``fmt``'s import records: Label Studio tasks whose prediction
    carries the model's ``version`` (``outputs.model_name``), in the names of the labelling config in the file
    ``label_config`` (``data.label_config``: its text fields, both of a sentence pair, its tag names, the labels it
    offers; without one Label Studio's template names), or doccano records; a label path is written by its end.
    ``left_out`` counts the labels the config does not offer."""

    def __init__(self, fmt: str, loaded, version: str, label_config: Optional[str] = None):
        from ernie_ft.data import label_config as configs

        self.fmt, self.path, self.left_out, self.config = fmt, label_config, 0, None
        self.xml = read_label_config(label_config, fmt)
        self.separator = (loaded.run or {}).get("task", {}).get("hierarchy_separator")
        self.version = version
        if self.xml is not None:  # the file's faults said before any answer is made: its XML and its texts
            texts = len((loaded.run or {}).get("inputs") or configs.PAIR[:1])
            self._config(lambda: configs.text_fields(self.xml, min(texts, len(configs.PAIR))))

    def _config(self, read):
        from ernie_ft.data.label_config import ConfigError

        try:
            return read()
        except ConfigError as e:
            raise UserError(f"{LABEL_CONFIG} {self.path}: {e}") from None

    def check(self, answer: dict) -> None:
        """The config read for answers like ``answer``: a UserError when it cannot take them (no ``<Choices>`` for a
        classifier's, no ``<Labels>`` for entities), said before a file is written where the answers are at hand."""
        from ernie_ft.data import label_config as configs
        from ernie_ft.data import pre_annotations

        if self.xml is not None and self.config is None:
            what, texts = pre_annotations.kind(answer), configs.texts_of(answer)
            self.config = self._config(lambda: configs.LabelConfig.parse(self.xml, what, texts))

    def __call__(self, answer: dict) -> dict:
        from ernie_ft.data import pre_annotations

        if self.fmt == "doccano":
            return pre_annotations.doccano_record(answer, self.separator)
        if self.xml is None:
            return pre_annotations.label_studio_task(answer, self.version, separator=self.separator)
        self.check(answer)
        task, dropped = self.config.task(answer, self.version, self.separator)
        self.left_out += dropped
        return task

    def note(self) -> Optional[str]:
        """The line saying how many predicted labels the config does not offer were left out, None when none."""
        if not self.left_out:
            return None
        return (f"note: {self.left_out} predicted labels that {LABEL_CONFIG} {self.path} does not offer were left "
                "out of the import")  # fmt: skip
