"""The table of task types: name -> Task class (one file per type beside this one).

Everything a type means is its class's (encoder/tasks/base.py lists the attributes);
modules elsewhere read them from this table and never name a type. Adding a type:
its file, and one entry here.
"""
from encoder import registry
from encoder.tasks.base import Task
from encoder.tasks.classification import Classification
from encoder.tasks.contrastive import Contrastive
from encoder.tasks.qa import QA
from encoder.tasks.regression import Regression
from encoder.tasks.tagging import Tagging

TASKS = {cls.name: cls for cls in (Classification, Regression, Tagging, QA, Contrastive)}

# The type of a task that names none (a suite folder with train.jsonl and no task.json).
DEFAULT = Classification.name


def lookup(name: str, tasks: dict = TASKS) -> type[Task]:
    """The Task class of a type name; an unknown name raises listing the valid ones."""
    return registry.lookup(tasks, name, "task type")


def having(attribute: str, tasks: dict = TASKS) -> list[str]:
    """The type names whose class sets `attribute` (a truthy value), in table order."""
    return [name for name, cls in tasks.items() if getattr(cls, attribute)]
