"""One row of the retrieval table (BUILD_NOTES.md, Figures, "Retrieval"): a model, or BM25,
scored on a BEIR folder at each Matryoshka dimension, one JSON line per dimension.

    python benchmarks/beir_eval.py --source=WORKDIR|hf:DIR|bm25 --beir=DIR [--dims=384,64]

The model is read as the suite reads it (encoder/retrieval/retriever.py: the run's pooling,
prefixes and Matryoshka dims, which --dims replaces; a ColBERT head scored by MaxSim, one
row); scores are encoder/retrieval/beir.py's trec_eval measures (nDCG@10, MRR@10,
recall@10/100, MAP).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="a workdir, hf:DIR, or bm25")
    parser.add_argument("--beir", required=True, help="corpus.jsonl, queries.jsonl, qrels/")
    parser.add_argument("--dims", default="", help="comma list of prefix dimensions "
                        "(empty: the model's full width)")
    args = parser.parse_args(argv)
    try:
        dims = tuple(int(x) for x in args.dims.split(",") if x)
    except ValueError:
        parser.error(f"--dims must be integers, got {args.dims!r}")
    from encoder.retrieval import beir
    corpus, queries, qrels, _ = beir.read_beir(args.beir)
    t0 = time.time()
    if args.source == "bm25":
        rows = {"-": beir.evaluate_bm25(corpus, queries, qrels)}
    else:
        from encoder.checkpoints import sources
        from encoder.retrieval import retriever
        view = retriever.of_source(sources.load(args.source))
        if view.tokens is not None:
            rows = {"maxsim": beir.evaluate_run(retriever.colbert_run(view, corpus, queries),
                                                qrels)}
        else:
            rows = beir.evaluate_dense(view.encode_queries, view.encode_docs, corpus, queries,
                                       qrels, dims=dims or view.dims)
    for dim, measures in rows.items():
        print(json.dumps({"source": args.source, "dim": dim,
                          **{k: round(float(v), 4) for k, v in measures.items()},
                          "seconds": round(time.time() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
