"""The downstream suite: a GLUE-style battery, an MTEB-style embedding benchmark and
per-layer probes, run by `python -m encoder suite` (encoder/commands/suite.py).

presets.py    the conventions as data (seeds, learning-rate grids, epochs, averages)
(the tasks themselves are encoder/tasks/: glue.py GLUE's files, labels and metrics;
catalog.py which tasks a folder holds and their prepared data; embedding.py STS and
retrieval scored on frozen embeddings, MTEB's conventions; also what a pretraining run's
declared evaluators read, encoder/jobs/evals.py)

options.py    SuiteOptions and the checks on them
data.py       the tasks of a folder (or the embedded battery) and their prepared data
plan.py       the fine-tuning grid as runs of the study runner (encoder/studies/runner.py)
frozen.py     the embedding tasks and per-layer probes, scored in this process
report.py     medians, the learning-rate choice, averages; suite.csv / .md / .png
baseline.py   rows for a method with no model (--baseline=bow | majority), same files
battery.py    the whole command, start to finish
"""
