"""Export a workdir of this codebase as a HuggingFace model folder.

    python -m encoder export --workdir=DIR --out=HF_DIR \
        [--format=transformers|sentence-transformers] [--family=bert|roberta|...]

DIR is anything `init_from` takes (a pretraining or fine-tuning workdir, a
params folder, hf:DIR). What is written follows from what DIR holds:
  * an MLM pretraining run -> `*ForMaskedLM` (AutoModelForMaskedLM, fill-mask);
  * an RTD (ELECTRA) run -> `ElectraForPreTraining` (the discriminator) in HF_DIR
    and the generator as `ElectraForMaskedLM` in HF_DIR/generator;
  * a fine-tuned classifier / regressor / tagger / QA model ->
    `*ForSequenceClassification` / `*ForTokenClassification` /
    `*ForQuestionAnswering`, with its label names;
  * --format=sentence-transformers -> the encoder plus sentence-transformers'
    modules (pooling rule, normalisation), so `SentenceTransformer(HF_DIR)`
    returns this codebase's embeddings.
The family is the HF architecture that computes the model exactly (chosen
when --family is not given); a model no family represents is refused with the
reason for each family, before anything is written. The tokenizer is written
as tokenizer.json for AutoTokenizer.
"""
import json
import os
import shutil
import tempfile

import jax
import numpy as np

from encoder import errors
from encoder.checkpoints import sources
from encoder.interop import hf, origin
from encoder.interop.family import Unrepresentable
from encoder.model.encoder import encoder_params
from encoder.retrieval import export as retrieval_export
from encoder.tasks.base import Export
from encoder.tasks.table import TASKS

FORMATS = ("transformers", "sentence-transformers", "pylate")  # pylate: a ColBERT run
ST_POOLING = {"cls": "pooling_mode_cls_token", "cls_tanh": "pooling_mode_cls_token",
              "cls_gelu": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
              "max": "pooling_mode_max_tokens"}
ST_DENSE_ACTIVATION = {"cls_tanh": "torch.nn.modules.activation.Tanh",
                       "cls_gelu": "torch.nn.modules.activation.GELU"}


def load_source(source: str) -> sources.Pretrained:
    """sources.load, its refusals naming this command's flag (--workdir), not init_from."""
    try:
        return sources.load(source)
    except (FileNotFoundError, ValueError) as e:
        text = str(e)
        if not text.startswith("init_from"):
            raise
        renamed = "--workdir" + text[len("init_from"):]
        raise (FileNotFoundError(renamed) if isinstance(e, FileNotFoundError)
               else errors.UsageError(renamed)) from None


def head_kind(p: sources.Pretrained, fmt: str) -> str:
    """What HF head the source's parameters make: see the module docstring."""
    if fmt == "sentence-transformers" and retrieval_export.is_sparse(p.run_config):
        return "mlm"  # SPLADE: SparseEncoder's MLMTransformer reads a *ForMaskedLM folder
    if fmt in ("sentence-transformers", "pylate"):
        return "base"
    if p.kind == "finetuning":
        return task_export(p).kind
    if "rtd_head" in p.params and "generator" in p.params:
        return "rtd"
    return "mlm" if "mlm_head" in p.params else "base"


def task_export(p: sources.Pretrained) -> Export:
    """How the source's task type is exported (a source with no known type: no head)."""
    return TASKS[p.task].export if p.task in TASKS else Export()


def pooling_of(p: sources.Pretrained) -> str:
    run = p.run_config
    return run.get("pooling", "cls") if run is not None else "cls"


def sentence_rule(p: sources.Pretrained, given: str, record: dict | None
                  ) -> tuple[str, bool, str]:
    """(pooling rule, Normalize or not, whose choice it is) of a sentence-transformers
    export: --pooling; a fine-tuning run's own rule; else the source's modules (an HF
    folder, or the record its import or a run continued from it kept:
    encoder/interop/origin.py), Normalize as the source has it; else the run's rule (cls
    by default)."""
    if given:
        return given, True, "--pooling's"
    run = p.run_config
    if run is not None and run.get("mode", "pretrain") == "finetune":
        return pooling_of(p), True, "the run's; --pooling to choose"
    st = (record or {}).get("sentence_transformers")
    if st and st.get("unsupported"):
        raise Unrepresentable(
            f"the source {record['source']} is a sentence-transformers model with modules "
            f"this export cannot reproduce ({', '.join(st['unsupported'])}); give "
            "--pooling=RULE to export with one of this codebase's rules knowingly")
    if st and st.get("pooling"):
        kept = " kept through this run" if run is not None else ""
        return st["pooling"], bool(st.get("normalize")), (
            f"the source's{kept}: {record['source']}/modules.json"
            + ("" if st.get("normalize") else ", no Normalize") + "; --pooling to choose")
    if run is None:
        return "cls", True, ("the default: the source names no pooling rule; --pooling to "
                             "choose")
    return pooling_of(p), True, "the run's; --pooling to choose"


def max_length(p: sources.Pretrained, record: dict | None = None) -> int:
    """The tokenizer's model_max_length: the run's length, or the source's where its
    positions were trained further (a run continued from a 512-token model at 128 still
    reads 512), never past the model's positions."""
    positions = int(p.model_cfg.max_position)
    source = (record or {}).get("model_max_length")
    source = min(int(source), positions) if source else 0
    run = p.run_config
    if run is not None and "data" in run:
        length = run.data.get("max_seq_len") or run.data.get("seq_len")
        if length:
            return max(int(length), source)
    return source or positions


def _discriminator(params) -> dict:
    return {"encoder": encoder_params(params), "rtd_head": params["rtd_head"]}


def _generator(params) -> dict:
    return {"encoder": {**params["generator"], "embed": params["embeddings"]},
            "mlm_head": params["generator_head"]}


def _generator_cfg(p: sources.Pretrained):
    from encoder.objectives import objectives
    e = p.run_config.electra
    return objectives.generator_config(p.model_cfg, e.generator_fraction, e.generator_layers)


def _pooler_dense(params) -> dict:
    for tree in (params.get("pooler"), params.get("head", {}).get("pooler"),
                 params.get("pair", {}).get("pooler")):
        if tree is not None and "dense" in tree:
            return tree["dense"]
    raise Unrepresentable("a parametric pooling rule (cls_tanh, cls_gelu) needs its pooler "
                          "(W, b) in the checkpoint, and this one has none")


def write_sentence_transformers(out: str, params, cfg, pooling: str, length: int,
                                extra: dict | None = None, normalize: bool = True) -> None:
    """sentence-transformers' modules: Transformer -> Pooling (-> Dense tanh) -> Normalize.

    Our embed job and Embedder L2-normalise the pooled vector, so Normalize is last
    (normalize=False: none, as a source without one had); cls_tanh / cls_gelu (a [CLS]
    pooler with parameters) are written as a Dense module with Tanh / GELU.
    """
    from safetensors.numpy import save_file
    if pooling not in ST_POOLING:
        raise Unrepresentable(f"pooling={pooling} has no sentence-transformers Pooling mode; "
                              f"supported: {sorted(ST_POOLING)}")
    modules = [("sentence_transformers.models.Transformer", "")]
    pool = {"word_embedding_dimension": cfg.hidden_size, "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": False, "include_prompt": True}
    pool[ST_POOLING[pooling]] = True
    _write_json(os.path.join(out, "1_Pooling", "config.json"), pool)
    modules.append(("sentence_transformers.models.Pooling", "1_Pooling"))
    if pooling in ST_DENSE_ACTIVATION:
        dense = _pooler_dense(params)
        folder = os.path.join(out, "2_Dense")
        _write_json(os.path.join(folder, "config.json"), {
            "in_features": cfg.hidden_size, "out_features": cfg.hidden_size, "bias": True,
            "activation_function": ST_DENSE_ACTIVATION[pooling]})
        save_file({"linear.weight": np.ascontiguousarray(np.asarray(dense["kernel"]).T),
                   "linear.bias": np.ascontiguousarray(dense["bias"])},
                  os.path.join(folder, "model.safetensors"))
        modules.append(("sentence_transformers.models.Dense", "2_Dense"))
    if normalize:
        modules.append(("sentence_transformers.models.Normalize", f"{len(modules)}_Normalize"))
        os.makedirs(os.path.join(out, modules[-1][1]), exist_ok=True)
    _write_json(os.path.join(out, "modules.json"), [
        {"idx": i, "name": str(i), "path": path, "type": kind}
        for i, (kind, path) in enumerate(modules)])
    _write_json(os.path.join(out, "sentence_bert_config.json"),
                {"max_seq_length": length, "do_lower_case": False})
    _write_json(os.path.join(out, "config_sentence_transformers.json"),
                {"similarity_fn_name": "cosine", "prompts": {}, "default_prompt_name": None,
                 **(extra or {})})  # a retriever's prompts, Matryoshka dims (retrieval/export.py)


def _write_json(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f, indent=1)


def _model_card(out: str, source: str, p: sources.Pretrained, family: str, kind: str,
                cls_name: str, final: str) -> None:
    cfg = p.model_cfg
    lines = [f"# {os.path.basename(os.path.abspath(source))}", "",
             f"Exported from `{source}` ({p.kind} source) by `python -m encoder export`.",
             "", f"- architecture: `{cls_name}` (family `{family}`, head `{kind}`)",
             f"- layers {cfg.num_layers}, width {cfg.hidden_size}, heads {cfg.num_heads}, "
             f"FFN {cfg.intermediate_size}, vocabulary {cfg.vocab_size}",
             f"- positions `{cfg.position}`, norm `{cfg.norm}`, activation `{cfg.activation}`"]
    if p.labels:
        lines.append(f"- labels: {', '.join(map(str, p.labels))}")
    auto = {"mlm": "AutoModelForMaskedLM", "rtd": "AutoModelForPreTraining",
            "sequence": "AutoModelForSequenceClassification",
            "token": "AutoModelForTokenClassification",
            "span": "AutoModelForQuestionAnswering"}.get(kind, "AutoModel")
    lines += ["", "```python", f"from transformers import {auto}, AutoTokenizer",
              f"tokenizer = AutoTokenizer.from_pretrained({final!r})",
              f"model = {auto}.from_pretrained({final!r})", "```", ""]
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines))


KIND = "export"  # the ownership marker's kind (encoder/errors.py)


def _written(folder: str) -> list[str]:
    """Every file under folder, relative (what this export wrote)."""
    return sorted(os.path.relpath(os.path.join(root, n), folder)
                  for root, _, names in os.walk(folder) for n in names)


def check_out(source: str, out: str) -> None:
    """--out may be new, empty, or a previous export that holds only what it wrote; never a
    file, a downloaded HF folder, a run, the source, or a folder with files added to it."""
    src = os.path.abspath(source.removeprefix("hf:"))
    dst = os.path.abspath(out)
    if dst == src or src.startswith(dst + os.sep) or dst.startswith(src + os.sep):
        raise errors.NotOurs(f"--out={out} is, contains or lies inside the source {source}: "
                             "choose a folder of its own")
    if errors.check_output(dst, KIND, "--out") != "ours":
        return
    added = errors.foreign_files(dst, errors.read_marker(dst).get("files", []))
    if added:
        shown = ", ".join(added[:5]) + (f", ... ({len(added)} files)" if len(added) > 5 else "")
        raise errors.NotOurs(f"--out={out} is a previous export, but holds files it did not "
                             f"write ({shown}); nothing was replaced: move them away or choose "
                             "another --out")


def unpadded(cfg, params):
    """(cfg, params) with a padded vocabulary's padding rows dropped (model.real_vocab_size):
    HF's models have no mask for them, and without them the exported softmax over the real
    tokens is exactly ours. The token tables' rows, the MLM output biases and an untied
    decoder's columns are sliced."""
    real, rows = int(cfg.get("real_vocab_size", 0) or 0), int(cfg.vocab_size)
    if not real or real == rows:
        return cfg, params

    def trim(path, x):
        name = jax.tree_util.keystr(path)
        if x.ndim >= 1 and x.shape[0] == rows and ("token" in name or "output_bias" in name):
            return x[:real]
        if x.ndim == 2 and x.shape[-1] == rows and "head" in name:
            return x[:, :real]
        return x
    cfg = cfg.copy_and_resolve_references()
    cfg.vocab_size, cfg.real_vocab_size = real, 0
    return cfg, jax.tree_util.tree_map_with_path(trim, params)


def export(source: str, out: str, fmt: str = "transformers", family: str = "",
           pooling: str = "") -> dict:
    """Writes the HF folder(s); returns {'family', 'kind', 'architecture', 'folders',
    'pooling'}. pooling: the sentence-transformers Pooling module's rule (empty: the run
    config's, cls where it has none)."""
    if fmt not in FORMATS:
        raise errors.UsageError(f"--format={fmt!r}; valid: {', '.join(FORMATS)}")
    if pooling and fmt != "sentence-transformers":
        raise errors.UsageError(f"--pooling={pooling} is the sentence-transformers Pooling "
                                "module's rule: give it with --format=sentence-transformers")
    if pooling and pooling not in ST_POOLING:
        raise errors.UsageError(f"--pooling={pooling!r}: expected one of {', '.join(ST_POOLING)}")
    check_out(source, out)
    p = load_source(source)
    kind = head_kind(p, fmt)
    cfg, p.params = unpadded(p.model_cfg, p.params)
    p.model_cfg = cfg
    params = p.params
    if kind == "rtd":
        params = _discriminator(p.params)
    family = family or hf.choose_family(cfg, kind)
    spec = task_export(p)
    labels = p.labels if kind in ("sequence", "token") else None
    problem = spec.problem if kind == "sequence" else ""
    if spec.labels is not None:
        labels = list(spec.labels)  # regression: one output, num_labels 1, as HF's heads
    record, pooler = origin.of_source(source)  # what the source was (interop/origin.py)
    length = max_length(p, record)
    sparse = fmt == "sentence-transformers" and retrieval_export.is_sparse(p.run_config)
    st_length, normalize, chosen = length, True, ""
    if fmt == "sentence-transformers" and not sparse:
        pooling, normalize, chosen = sentence_rule(p, pooling, record)
        st = (record or {}).get("sentence_transformers") or {}
        if chosen.startswith("the source's") and st.get("max_seq_length"):
            st_length = min(int(st["max_seq_length"]), length)
    pooling = pooling or pooling_of(p)
    carried = kind == "base" and "pooler" not in params and pooler is not None and not sparse
    if carried:
        params = {**params, "pooler": {"dense": pooler}}  # the source's, kept by the run
    if sparse:
        why = retrieval_export.sparse_unrepresentable(p.run_config, params)
        if why:  # refused before anything is written
            raise Unrepresentable(why)
        params = {k: params[k] for k in ("encoder", "mlm_head")}
    elif fmt == "sentence-transformers" and pooling in ST_DENSE_ACTIVATION:
        _pooler_dense(params)  # refuse before writing anything
    dst = os.path.abspath(out)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    # A fresh hidden sibling (same file system: the swap below is a rename); never a
    # fixed name such as OUT.partial, which may be somebody's folder.
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(dst)}.partial-",
                           dir=os.path.dirname(dst))
    try:
        written = hf.write_folder(tmp, family, cfg, params, kind, p.tokenizer, labels, problem,
                                  length, pooling)
        folders = [out]
        if kind == "rtd":
            hf.write_folder(os.path.join(tmp, "generator"), family, _generator_cfg(p),
                            _generator(p.params), "mlm", p.tokenizer, max_length=length)
            folders.append(os.path.join(out, "generator"))
        if sparse:
            retrieval_export.write_sparse_encoder(tmp, cfg.vocab_size, length, p.run_config)
        elif fmt == "sentence-transformers":
            write_sentence_transformers(tmp, params, cfg, pooling, st_length,
                                        retrieval_export.st_config_extra(p.run_config),
                                        normalize)
        if fmt == "pylate":
            retrieval_export.write_pylate(tmp, params, cfg, length, p.run_config)
        _model_card(tmp, source, p, family, kind, written["architectures"][0], out)
        carried = carried and any("pooler." in n for n in origin.tensor_names(tmp))
        errors.mark_output(tmp, KIND, source=source, files=_written(tmp))
        errors.as_made_by_user(tmp)  # not mkdtemp's 0700, safetensors' 0600: a lab reads it
        check_out(source, out)  # again: nothing may have been added meanwhile
        _swap_in(tmp, dst)  # a folder at `out` is always complete
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"family": family, "kind": kind, "architecture": written["architectures"][0],
            "folders": folders, "pooling": pooling if fmt == "sentence-transformers" else "",
            "pooling_from": chosen, "normalize": normalize, "model_max_length": length,
            "pooler": "the source's (not trained by this run)" if carried else ""}


def _swap_in(tmp: str, dst: str) -> None:
    """Puts tmp at dst; a previous export there is renamed aside first and removed only
    once the new one is in place (a crash in between loses neither)."""
    if not os.path.isdir(dst):
        os.replace(tmp, dst)
        return
    if not os.listdir(dst):
        os.rmdir(dst)  # an empty folder: nothing of anyone's
        os.replace(tmp, dst)
        return
    aside = tempfile.mkdtemp(prefix=f".{os.path.basename(dst)}.old-", dir=os.path.dirname(dst))
    os.rmdir(aside)
    os.replace(dst, aside)
    os.replace(tmp, dst)
    shutil.rmtree(aside)  # the previous export: check_out found only its own files

