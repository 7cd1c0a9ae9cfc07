"""Task files read by type name: the door callers outside encoder/tasks/ use.

    examples = readers.read_examples(path, task.type)   # .tsv, a type's format, or JSONL

Readers return a list of example dicts and fail on a malformed line with the file and
line number. The formats every type shares (JSON lines, GLUE TSV) and the errors are
encoder/tasks/files.py; the fields a type's examples carry, its line checks, label
names, extra formats (SQuAD .json for qa) and its featurizer are its own class's,
in encoder/tasks/<type>.py. This module only looks the type up in TASKS.
"""
from encoder.tasks import files
from encoder.tasks.files import IGNORE, TaskDataError, read_glue_tsv  # noqa: F401  (re-exported)
from encoder.tasks.table import lookup
# The tagging featurizer's word alignment, which tests/jobs/test_probe_tagging.py reads here.
from encoder.tasks.tagging import featurize_tagging  # noqa: F401  (re-exported)


def read_jsonl(path: str, task: str) -> list[dict]:
    """A JSON-lines file of a task type: one object per line, blank lines skipped."""
    cls = lookup(task)
    return files.read_jsonl(path, cls.fields, cls.check_line)


def read_examples(path: str, task: str) -> list[dict]:
    """A task file in any format the type reads (GLUE TSV, its own, JSON lines)."""
    return lookup(task).read_file(path)


class LabelSet(files.LabelSet):
    """files.LabelSet, fixed from a training file by the type's label_names."""

    @classmethod
    def from_examples(cls, examples, task: str) -> "LabelSet":
        return cls(lookup(task).label_names(examples))
