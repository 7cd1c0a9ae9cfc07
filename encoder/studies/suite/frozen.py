"""Scores on frozen features, computed in the suite's own process: the embedding tasks
(MTEB's conventions, embedding.py) and the per-layer linear probes (encoder/jobs/probe.py).
Each result is cached under OUT/embeddings/ and OUT/probes/, keyed by what produced it:
the source's identity (checkpoint step and content hash, not its path alone: a model
trained on at the same path is scored again) and the task files' hashes."""
import json
import os

from encoder.eval import identity
from encoder.studies.suite import presets, report
from encoder.tasks import catalog, embedding
from encoder.studies.suite.options import SuiteOptions


# A cached retrieval score computed before the retriever view (prefixes, dims, ColBERT,
# trec_eval's measures and MAP) is recomputed, not read back.
SCORING = "retriever-v1"


def _model_key(source: dict | None) -> dict | None:
    return {k: source.get(k) for k in identity.COMPARED} if source else None


def embedding_rows(tasks: list, src, preset: dict, opts: SuiteOptions, root: str,
                   source: dict | None = None, task_files: dict | None = None) -> list:
    """Rows of the embedding tasks: one per seed with --random_init, else one. source and
    task_files: the identities (encoder/eval/identity.py) the cache key and rows carry."""
    from encoder.jobs import probe
    rows = []
    seeds = range(preset["seeds"]) if opts.random_init else [0]
    for task in [t for t in tasks if t.kind != "finetune"]:
        max_len = presets.seq_len_for(preset, "sequence", task.max_seq_len)
        for seed in seeds:
            key = {"init_from": opts.init_from, "random_init": opts.random_init, "seed": seed,
                   "pooling": opts.embedding_pooling, "max_len": max_len,
                   "max_eval": preset["max_eval"], "files": task.files,
                   "scoring": SCORING if task.kind == "retrieval" else None,
                   "model": _model_key(source), "data": (task_files or {}).get(task.name)}

            def compute(task=task, seed=seed, max_len=max_len):
                params = probe.random_params(src.model_cfg, seed) if opts.random_init \
                    else src.params
                encode = embedding.encoder_fn(src.model_cfg, params, src.tokenizer,
                                              opts.embedding_pooling, max_len)
                view = None
                if task.kind == "retrieval":  # the model as it was trained to retrieve
                    from encoder.retrieval import retriever
                    view = retriever.of_source(src, opts.embedding_pooling, max_len,
                                               params=params)
                return embedding.evaluate(task, encode, preset["max_eval"], view)
            raw = embedding.cached(os.path.join(root, "embeddings", task.name, f"{seed}.json"),
                                   key, compute)
            rows.append({**report.row(task, None, seed,
                                      {k: report.percent(k, v) for k, v in raw.items()},
                                      preset["average"],
                                      os.path.join(root, "embeddings", task.name)),
                         "inputs": {"source": source,
                                    "data": (task_files or {}).get(task.name)}, "via": ""})
    return rows


PROBE_MAX_TOKENS = 20000  # training words per tagging probe (a seeded draw)


def probe_table(tasks: list, prepared: dict, src, preset: dict, opts: SuiteOptions,
                root: str, source: dict | None = None) -> dict:
    """Per-layer probes of the classification, regression and tagging tasks
    (encoder/jobs/probe.py: whichever probe the type names; tagging per word, by entity F1)."""
    from encoder.tasks import readers as tasks_lib
    from encoder.tasks.table import TASKS
    from encoder.jobs import probe
    out_dir = os.path.join(root, "probes")
    table = {}
    for task in [t for t in tasks if t.kind == "finetune" and probe.probed(t.type)]:
        p = prepared[task.name]
        max_len = presets.seq_len_for(preset, task.type, task.max_seq_len)
        key = {"init_from": opts.init_from, "random_init": opts.random_init,
               "train": p.train[0], "dev": p.dev, "max_train": opts.probe_max_train,
               "max_len": max_len, "model": _model_key(source),
               "data": identity.files_identity({"train": p.train[0], "dev": p.dev})}
        if TASKS[task.type].probe == "token":
            key["max_tokens"] = PROBE_MAX_TOKENS

        def compute(task=task, p=p, max_len=max_len):
            train = catalog.subsample(tasks_lib.read_jsonl(p.train[0], task.type),
                                      opts.probe_max_train, 0)
            dev = tasks_lib.read_jsonl(p.dev, task.type)
            params = probe.random_params(src.model_cfg, 0) if opts.random_init else src.params
            return probe.probe_examples(src.model_cfg, params, src.tokenizer, train, dev,
                                        task.type, max_len, 0, PROBE_MAX_TOKENS)
        table[task.name] = embedding.cached(os.path.join(out_dir, f"{task.name}.json"), key,
                                            compute)
    if table:
        with open(os.path.join(out_dir, "probes.json"), "w") as f:
            json.dump(table, f, indent=1)
        probe.heatmap(table, os.path.join(out_dir, "probes.png"))
    return table
