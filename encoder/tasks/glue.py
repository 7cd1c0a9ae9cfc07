"""GLUE's tasks as data: folder name -> files, task type, labels, metrics.

A folder in GLUE's own layout (as GLUE's download script writes it) is
recognised by its name, case and punctuation aside (`SST-2`, `sst2`, `STS-B`).
Every file is read by encoder/tasks/files.py's GLUE TSV reader; the table says
which files are the splits and which metrics GLUE reports (Wang et al. 2019,
Table 1): Matthews correlation for CoLA, F1 and accuracy for MRPC and QQP
(F1 of the positive class "1"), Pearson and Spearman for STS-B, accuracy
elsewhere, MNLI on both its matched and mismatched dev sets.

A metric is (name, split, key): the value eval.json reports for `split` under
`key`; MNLI's mismatched dev set runs as the fine-tuning job's test file, so its
accuracy is eval.json's test accuracy. `binary_f1` is computed by the suite from
predictions.jsonl (the fine-tuning job reports macro F1, not GLUE's).
"""

ACC = (("accuracy", "dev", "accuracy"),)
F1_ACC = (("f1", "dev", "binary_f1"), ("accuracy", "dev", "accuracy"))
ENTAIL = ("entailment", "not_entailment")
BINARY = ("0", "1")

GLUE_TASKS = {
    "CoLA": dict(type="classification", pair=False, labels=BINARY,
                 metrics=(("mcc", "dev", "mcc"),)),
    "SST-2": dict(type="classification", pair=False, labels=BINARY, metrics=ACC),
    "MRPC": dict(type="classification", pair=True, labels=BINARY, metrics=F1_ACC,
                 positive="1"),
    "QQP": dict(type="classification", pair=True, labels=BINARY, metrics=F1_ACC,
                positive="1"),
    "STS-B": dict(type="regression", pair=True, labels=None,
                  metrics=(("pearson", "dev", "pearson"), ("spearman", "dev", "spearman"))),
    "MNLI": dict(type="classification", pair=True,
                 labels=("contradiction", "entailment", "neutral"),
                 files={"train": "train.tsv", "dev": "dev_matched.tsv",
                        "test": "dev_mismatched.tsv"},
                 metrics=(("accuracy_m", "dev", "accuracy"), ("accuracy_mm", "test", "accuracy"))),
    "QNLI": dict(type="classification", pair=True, labels=ENTAIL, metrics=ACC),
    "RTE": dict(type="classification", pair=True, labels=ENTAIL, metrics=ACC),
    "WNLI": dict(type="classification", pair=True, labels=BINARY, metrics=ACC),
}
DEFAULT_FILES = {"train": "train.tsv", "dev": "dev.tsv"}


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


_BY_KEY = {_key(name): name for name in GLUE_TASKS}


def glue_name(folder_name: str) -> str | None:
    """GLUE's spelling of a task folder's name, or None when it is not a GLUE task."""
    return _BY_KEY.get(_key(folder_name))


def files_of(name: str) -> dict:
    """split -> file name for a GLUE task (test.tsv is unlabelled and left out)."""
    return GLUE_TASKS[name].get("files", DEFAULT_FILES)
