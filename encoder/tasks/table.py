"""The table of task types: name -> Task class (one file per type beside this one)."""
from encoder.finetune.classification import Classification
from encoder.finetune.contrastive import Contrastive
from encoder.finetune.qa import QA
from encoder.finetune.regression import Regression
from encoder.finetune.tagging import Tagging

TASKS = {cls.name: cls for cls in (Classification, Regression, Tagging, QA, Contrastive)}
