"""The downstream suite: a GLUE-style battery, an MTEB-style embedding benchmark and
per-layer probes, run by `python -m encoder.suite` (encoder/commands/suite.py).

presets.py    the conventions as data (seeds, learning-rate grids, epochs, averages)
glue.py       GLUE's tasks: files, columns, labels, metrics
catalog.py    which tasks a folder holds; each task's data prepared for the runs
options.py    SuiteOptions and the checks on them
data.py       the tasks of a folder (or the embedded battery) and their prepared data
plan.py       the fine-tuning grid as runs of the study runner (encoder/studies/runner.py)
frozen.py     the embedding tasks and per-layer probes, scored in this process
embedding.py  STS and retrieval scored on frozen embeddings (MTEB's conventions)
report.py     medians, the learning-rate choice, averages; suite.csv / .md / .png
baseline.py   rows for a method with no model (--baseline=bow | majority), same files
battery.py    the whole command, start to finish
"""
