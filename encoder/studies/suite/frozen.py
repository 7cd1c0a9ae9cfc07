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

            if task.kind == "retrieval" and opts.retriever:
                table = retriever_table(task, src, opts, preset, max_len, seed, root, key)
                raw = {k: v for k, v in table[methods(opts)[0]].items() if k not in COSTS}
                rows.append(_row(task, seed, raw, preset, root, source, task_files))
                continue

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
            rows.append(_row(task, seed, raw, preset, root, source, task_files))
    return rows


def _row(task, seed, raw, preset, root, source, task_files) -> dict:
    return {**report.row(task, None, seed, {k: report.percent(k, v) for k, v in raw.items()},
                         preset["average"], os.path.join(root, "embeddings", task.name)),
            "inputs": {"source": source, "data": (task_files or {}).get(task.name)}, "via": ""}


# --retriever: a retrieval task scored by each named method, side by side (retriever.py's
# as_method and evaluate_costs); the task's row in the suite's table is the first method's.
COSTS = ("index_bytes", "bytes_per_passage", "queries_per_s", "query_terms", "doc_terms",
         "bytes_per_token", "float32_bytes_per_token", "recall_vs_exact_at_10")
TABLE_COLUMNS = (("ndcg_at_10", "nDCG@10", 100), ("recall_at_100", "R@100", 100),
                 ("bytes_per_passage", "bytes/passage", 1), ("queries_per_s", "queries/s", 1),
                 ("query_terms", "terms/query", 1), ("doc_terms", "terms/doc", 1),
                 ("recall_vs_exact_at_10", "R@10 vs exact", 1))


def methods(opts: SuiteOptions) -> list:
    return [m.strip() for m in opts.retriever.split(",") if m.strip()]


def check_methods(opts: SuiteOptions) -> None:
    """--retriever's names, before anything is read or scored."""
    from encoder.retrieval import retriever
    bad = [m for m in methods(opts) if m not in retriever.METHODS]
    if bad or (opts.retriever and not methods(opts)):
        raise ValueError(f"--retriever={opts.retriever!r}: expected a comma-separated list of "
                         f"{', '.join(retriever.METHODS)}")


def retriever_table(task, src, opts: SuiteOptions, preset: dict, max_len: int, seed: int,
                    root: str, key: dict) -> dict:
    """{method: measures and costs} of one retrieval task, each method cached on its own
    (OUT/embeddings/TASK/SEED.METHOD.json), the table written beside as retrievers.md and
    retrievers.json and printed."""
    from encoder.jobs import probe
    from encoder.retrieval import retriever
    folder = os.path.join(root, "embeddings", task.name)
    table = {}
    for method in methods(opts):
        def compute(method=method):
            params = probe.random_params(src.model_cfg, seed) if opts.random_init \
                else src.params
            view = retriever.as_method(src, method, opts.embedding_pooling, max_len,
                                       params=params)
            data = embedding.read_retrieval(task.files, preset["max_eval"])
            return retriever.evaluate_costs(view, *data, ks=embedding.RECALL_AT)
        table[method] = embedding.cached(os.path.join(folder, f"{seed}.{method}.json"),
                                         {**key, "method": method}, compute)
    with open(os.path.join(folder, "retrievers.json"), "w") as f:
        json.dump(table, f, indent=1)
    text = retriever_markdown(task.name, table)
    with open(os.path.join(folder, "retrievers.md"), "w") as f:
        f.write(text)
    print(text, flush=True)
    return table


def retriever_markdown(name: str, table: dict) -> str:
    """One line per method: quality, index size, query speed, terms (SPLADE)."""
    head = "| " + " | ".join(["method"] + [t for _, t, _ in TABLE_COLUMNS]) + " |"
    lines = [f"### {name}: one method per row", "", head,
             "|" + "---|" * (1 + len(TABLE_COLUMNS))]
    for method, m in table.items():
        cells = [f"{m[k] * scale:.2f}" if k in m else "" for k, _, scale in TABLE_COLUMNS]
        lines.append("| " + " | ".join([method] + cells) + " |")
    return "\n".join(lines) + "\n"


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
