"""What a retriever adds to an export (encoder/jobs/export.py writes the folders).

* sentence-transformers: the run's task prefixes as prompts ("query", "document": the
  names mteb and sentence-transformers' encode_query / encode_document use) and its
  Matryoshka dimensions (`matryoshka_dims`, for SentenceTransformer(..., truncate_dim=d)).
* PyLate (--format=pylate): a ColBERT folder: the encoder (Transformer) then PyLate's
  bias-free Dense projection (1_Dense), and a config that asks PyLate for exactly our
  MaxSim: no [Q]/[D] marker tokens, no query expansion, no skiplist, our lengths; the
  run's text prefixes as prompts.
* sentence-transformers' SparseEncoder (--format=sentence-transformers of a SPLADE run,
  contrastive.head=sparse): the encoder with its MLM head as a *ForMaskedLM folder
  (MLMTransformer), then SpladePooling (max over tokens of log(1 + ReLU)), dot-product
  similarity, the run's prefixes as prompts: SparseEncoder(OUT) gives our weights. A run
  whose queries keep only their own terms (sparse_query=terms) is refused: SparseEncoder
  expands queries as documents.
"""
import json
import os

import numpy as np

from encoder.retrieval import options

PYLATE_DENSE = "pylate.models.Dense.Dense"
SPARSE_MODULES = ("sentence_transformers.sparse_encoder.modules.MLMTransformer",
                  "sentence_transformers.sparse_encoder.modules.SpladePooling")


def is_sparse(run_config) -> bool:
    return options.of_run(run_config).head == "sparse"


def sparse_unrepresentable(run_config, params) -> str:
    """Why SparseEncoder cannot represent this SPLADE run exactly ("" when it can): it
    needs the MLM head and expands queries as documents."""
    if "mlm_head" not in params:
        return ("a sparse (SPLADE) export needs the MLM head (params 'mlm_head'), and this "
                "checkpoint has none")
    if options.of_run(run_config).sparse_query != "expand":
        return ("contrastive.sparse_query=terms keeps a query's own terms only; "
                "sentence-transformers' SparseEncoder expands queries as it expands "
                "documents, so its scores would not be this model's")
    return ""


def write_sparse_encoder(out: str, vocab: int, length: int, run_config=None) -> None:
    """SparseEncoder's modules beside the *ForMaskedLM folder already in `out`."""
    _write_json(os.path.join(out, "1_SpladePooling", "config.json"), {
        "pooling_strategy": "max", "activation_function": "relu",
        "embedding_dimension": int(vocab)})
    _write_json(os.path.join(out, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": SPARSE_MODULES[0]},
        {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": SPARSE_MODULES[1]}])
    _write_json(os.path.join(out, "sentence_bert_config.json"),
                {"max_seq_length": length, "do_lower_case": False})
    _write_json(os.path.join(out, "config_sentence_transformers.json"), {
        "model_type": "SparseEncoder", "similarity_fn_name": "dot",
        "prompts": st_config_extra(run_config).get("prompts", {}),
        "default_prompt_name": None})


def st_config_extra(run_config) -> dict:
    """config_sentence_transformers.json fields of a contrastive run (empty otherwise)."""
    o = options.of_run(run_config)
    out = {}
    prompts = {"query": o.query_prefix, "document": o.passage_prefix}
    if any(prompts.values()):
        out["prompts"] = prompts
    if o.matryoshka_dims:
        out["matryoshka_dims"] = sorted({int(d) for d in o.matryoshka_dims}, reverse=True)
    return out


def _write_json(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f, indent=2)


def write_pylate(out: str, params, cfg, length: int, run_config=None) -> None:
    """PyLate's modules beside the HF encoder folder already in `out`."""
    from safetensors.numpy import save_file
    if "colbert" not in params:
        raise ValueError("--format=pylate needs a ColBERT head: a contrastive run with "
                         "contrastive.head=colbert (its params hold 'colbert')")
    kernel = np.asarray(params["colbert"]["kernel"], np.float32)  # [D, K]
    folder = os.path.join(out, "1_Dense")
    _write_json(os.path.join(folder, "config.json"), {
        "in_features": int(kernel.shape[0]), "out_features": int(kernel.shape[1]),
        "bias": False, "activation_function": "torch.nn.modules.linear.Identity",
        "use_residual": False})
    save_file({"linear.weight": np.ascontiguousarray(kernel.T)},
              os.path.join(folder, "model.safetensors"))
    _write_json(os.path.join(out, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": PYLATE_DENSE}])
    _write_json(os.path.join(out, "sentence_bert_config.json"),
                {"max_seq_length": length, "do_lower_case": False})
    # PyLate's query_prefix / document_prefix are marker tokens it adds to the vocabulary
    # ([Q], [D]); a run's text prefixes are prompts (encode(..., prompt_name="query")).
    _write_json(os.path.join(out, "config_sentence_transformers.json"), {
        "prompts": st_config_extra(run_config).get("prompts", {}), "default_prompt_name": None,
        "similarity_fn_name": "MaxSim", "query_prefix": "", "document_prefix": "",
        "query_length": length, "document_length": length,
        "attend_to_expansion_tokens": False, "skiplist_words": [],
        "do_query_expansion": False})
