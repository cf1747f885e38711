"""``read_records``: a served request's inputs reach the task as records in memory.

    python docs/examples/hook_read_records.py

The default (``TaskHooks.read_records``) writes the records to a temporary JSON Lines file and calls
``read``; a task can read them directly and name a bad field where it is (``inputs[1].text``).
"""

from dataclasses import dataclass

from ernie_ft import UserError
from ernie_ft.config import DataConfig
from ernie_ft.data.readers import Example
from ernie_ft.task import resolve_task

Sentiment = resolve_task("docs/examples/skeleton.py:Sentiment")


@dataclass
class InMemory(Sentiment):
    def read_records(self, records, data, flag):
        examples = []
        for i, record in enumerate(records):
            text = record.get("text")
            if not isinstance(text, str) or not text.strip():
                raise UserError(f"{flag}[{i}].text: give the review as a non-empty string")
            examples.append(Example(text=text, text_pair=None, label=None, line=i + 1, source=flag))
        return examples


if __name__ == "__main__":
    records = [{"text": "房间很干净，早餐也不错"}, {"text": "太吵了，不会再来"}]
    default = Sentiment().read_records(records, DataConfig(), "inputs")  # through a temporary JSONL file
    own = InMemory().read_records(records, DataConfig(), "inputs")
    print("default:", [e.text for e in default])
    print("own:    ", [e.text for e in own])
    try:
        InMemory().read_records([{"text": "好"}, {"text": "  "}], DataConfig(), "inputs")
    except UserError as error:
        print(f"error: {error}")
