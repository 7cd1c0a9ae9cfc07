"""From encoder to retriever: the retrieval library.

losses.py   in-batch contrastive loss over every device's passages (hard negatives,
            duplicates masked, symmetric option, fixed or learned temperature) and
            Matryoshka's nested prefix dimensions
model.py    the retriever module (encoder + pooling + learned temperature + ColBERT
            projection) and the cached (GradCache) chunked embedding
colbert.py  late interaction: MaxSim scoring, a token-vector index and its search
search.py   exact top-k by a chunked matmul sharded over every device
beir.py     BEIR's folder format, trec_eval's measures on run files, dense evaluation
bm25.py     the BM25 row (Okapi BM25, Lucene's idf)
mining.py   hard negatives mined by a model (positive and likely false negatives dropped)
mteb_model.py  the encoder protocol `mteb` evaluates

It sits between eval/ (which it reads) and tasks/ (the contrastive task reads it).
The mining program is encoder/jobs/mine.py; `python -m encoder mine` is its
command.
"""
