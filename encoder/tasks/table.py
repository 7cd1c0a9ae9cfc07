"""The table of task types: name -> Task class (one file per type beside this one)."""
from encoder.tasks.classification import Classification
from encoder.tasks.contrastive import Contrastive
from encoder.tasks.qa import QA
from encoder.tasks.regression import Regression
from encoder.tasks.tagging import Tagging

TASKS = {cls.name: cls for cls in (Classification, Regression, Tagging, QA, Contrastive)}
