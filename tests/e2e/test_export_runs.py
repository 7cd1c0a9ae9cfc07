"""Exports of trained workdirs (encoder/jobs/export.py): an RTD run as discriminator +
generator, fine-tuned classifiers with the same dev predictions in transformers,
sentence-transformers with our embeddings, the main job's model through transformers'
fill-mask pipeline and through the CLI (parity of the families themselves:
tests/interop/test_export.py)."""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from encoder.checkpoints import sources
from encoder.jobs import export as export_lib
from encoder.interop.family import Unrepresentable
from encoder.model import models
from helpers import awkward_texts, child_env, LazyModule, pair_batch, ROOT, topic_config, topic_task

torch, T = LazyModule("torch"), LazyModule("transformers")


def test_rtd_workdir_exports_discriminator_and_generator(tmp_path):
    from encoder.jobs import pretrain
    from experiments import pretrain as pretrain_exp
    work = str(tmp_path / "rtd")
    config = pretrain_exp.get_config("objective=rtd,position=learned,runlocal")
    config.train.update(dict(num_steps=2, eval_every=0, checkpoint_every=2))
    pretrain.train(config, work, devices=jax.devices()[:1])
    out = tmp_path / "hf"
    result = export_lib.export(work, str(out))
    assert result["architecture"] == "ElectraForPreTraining"
    p = sources.load(work)
    disc = T.AutoModelForPreTraining.from_pretrained(out).eval()
    gen = T.AutoModelForMaskedLM.from_pretrained(out / "generator").eval()
    assert type(gen).__name__ == "ElectraForMaskedLM"
    ids, seg, mask = pair_batch()
    ids = np.minimum(ids, p.tokenizer.vocab_size - 1)
    model = models.Electra(models.freeze(p.model_cfg),
                           models.freeze(export_lib._generator_cfg(p)))
    args = [a.astype(np.int32) for a in (ids, seg, mask)]
    rtd, _ = model.apply({"params": p.params}, *args, None, None, method=models.Electra.discriminate)
    gen_logits = model.apply({"params": p.params}, *args, None, None, None,
                             method=models.Electra.generate)
    with torch.no_grad():
        t = dict(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(seg),
                 attention_mask=torch.tensor(mask))
        ref_rtd, ref_gen = disc(**t).logits.numpy(), gen(**t).logits.numpy()
    real = mask.astype(bool)
    assert np.abs(np.asarray(rtd) - ref_rtd)[real].max() <= 1e-4
    # the run's vocabulary is padded; the export carries the real rows (the padding's
    # logits here are masked, HF's model has none)
    assert ref_gen.shape[-1] == p.tokenizer.vocab_size < gen_logits.shape[-1]
    gen_logits = np.asarray(gen_logits)[..., :ref_gen.shape[-1]]
    assert np.abs(gen_logits - ref_gen)[real].max() <= 1e-4


def _finetune(source, folder, pooling):
    from encoder.jobs import finetune as run
    tasks = topic_task(folder / "task")
    config = topic_config(source, tasks, num_epochs=1)
    config.pooling = pooling
    run.finetune(config, str(folder / "work"), devices=jax.devices()[:1])
    return str(folder / "work"), tasks


@pytest.fixture(scope="module")
def finetuned(tiny_pretrained, tmp_path_factory):
    """The main job's recipe (RoPE) fine-tuned with RoFormer's classification head."""
    return _finetune(tiny_pretrained, tmp_path_factory.mktemp("ft"), "cls_gelu")


@pytest.fixture(scope="module")
def finetuned_bert(tmp_path_factory):
    """Learned positions, fine-tuned with BERT's pooler (pooling=cls_tanh)."""
    from encoder.jobs import pretrain
    from experiments import pretrain as pretrain_exp
    d = tmp_path_factory.mktemp("ftb")
    config = pretrain_exp.get_config("position=learned,runlocal")
    config.train.update(dict(num_steps=2, eval_every=0, checkpoint_every=2))
    pretrain.train(config, str(d / "pre"), devices=jax.devices()[:1])
    return _finetune(str(d / "pre"), d, "cls_tanh")


def _dev_predictions_agree(work, tasks, out):
    model = T.AutoModelForSequenceClassification.from_pretrained(out).eval()
    auto = T.AutoTokenizer.from_pretrained(out)
    dev = [json.loads(line) for line in open(os.path.join(tasks, "dev.jsonl"))]
    ours = [json.loads(line) for line in open(os.path.join(work, "predictions.jsonl"))]
    enc = auto([r["text"] for r in dev], padding=True, return_tensors="pt")
    with torch.no_grad():
        pred = model(**enc).logits.argmax(-1).tolist()
    assert [model.config.id2label[i] for i in pred] == [
        r["label"] for r in ours if r["split"] == "dev"]
    assert set(model.config.label2id) == {"io", "other"}
    return type(model).__name__


def test_finetuned_classifiers_export_with_the_same_dev_predictions(finetuned, finetuned_bert,
                                                                    tmp_path):
    work, tasks = finetuned
    export_lib.export(work, str(tmp_path / "rf"))
    assert _dev_predictions_agree(work, tasks, tmp_path / "rf") == \
        "RoFormerForSequenceClassification"
    work, tasks = finetuned_bert
    for family, cls in (("bert", "BertForSequenceClassification"),
                        ("roberta", "RobertaForSequenceClassification")):
        export_lib.export(work, str(tmp_path / family), family=family)
        assert _dev_predictions_agree(work, tasks, tmp_path / family) == cls
    # BERT's head is tanh(W h + b): a cls_tanh model is not a RoFormer/ELECTRA classifier
    with pytest.raises(Unrepresentable, match="pooling=cls_gelu"):
        export_lib.export(work, str(tmp_path / "el"), family="electra")


def test_a_classifier_without_a_head_the_family_has_is_refused(tiny_pretrained, tmp_path):
    work, _ = _finetune(tiny_pretrained, tmp_path, "mean")
    with pytest.raises(Unrepresentable, match="Fine-tune with pooling=cls_gelu"):
        export_lib.export(work, str(tmp_path / "hf"))
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("pooling, by_flag", [("mean", False), ("cls_gelu", False),
                                              ("max", True)])
def test_sentence_transformers_matches_our_embeddings(finetuned, tmp_path, pooling, by_flag):
    from sentence_transformers import SentenceTransformer
    from encoder.eval import embeddings
    import shutil
    work = str(tmp_path / "work")
    shutil.copytree(finetuned[0], work)  # the module's workdir stays as it is
    p = sources.load(work)
    if not by_flag:
        p.run_config.pooling = pooling
        with open(os.path.join(work, "config.json"), "w") as f:  # the run's pooling rule
            f.write(p.run_config.to_json())
    result = export_lib.export(work, str(tmp_path / "st"), fmt="sentence-transformers",
                               pooling=pooling if by_flag else "")
    assert result["pooling"] == pooling  # --pooling wins over the run's own
    st = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    texts = awkward_texts(40)[1:]
    theirs = st.encode(texts, convert_to_numpy=True, batch_size=8)
    params = dict(p.params)
    if pooling == "cls_gelu":
        params["pooler"] = p.params["head"]["pooler"]
    ours = embeddings.embed_texts(p.model_cfg, params, p.tokenizer, texts, pooling,
                                  max_len=export_lib.max_length(p))
    cos = np.sum(theirs * ours, -1) / np.linalg.norm(theirs, axis=-1) / np.linalg.norm(ours, axis=-1)
    print(f"{pooling}: min cosine {cos.min():.7f}")
    assert cos.min() >= 0.9999


def test_cli_exports_the_main_jobs_model_as_roformer(tiny_pretrained, tmp_path):
    out = tmp_path / "hf"
    proc = subprocess.run([sys.executable, "-m", "encoder", "export",
                           f"--workdir={tiny_pretrained}", f"--out={out}"], cwd=ROOT,
                          capture_output=True, text=True, env=child_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "RoFormerForMaskedLM (family roformer, head mlm)" in proc.stdout
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "README.md"} <= set(os.listdir(out))
    bad = subprocess.run([sys.executable, "-m", "encoder", "export",
                          f"--workdir={tiny_pretrained}", f"--out={tmp_path / 'b'}",
                          "--family=bert"], cwd=ROOT, capture_output=True, text=True,
                         env=child_env())
    assert bad.returncode != 0 and "export: bert cannot represent this model" in bad.stderr
    assert "Traceback" not in bad.stderr


def held_out_masked_sentences(tokenizer, n=30, seed=0):
    """(text with one [MASK], the word) from held-out stdlib documents; the masked word is
    one lowercase piece of the vocabulary, so one [MASK] stands for it."""
    import random
    import re
    from encoder.data import corpus
    rng = random.Random(seed)
    docs = [d for d in corpus.stdlib_documents() if corpus.is_validation(d, 0.05)]
    out = []
    for doc in rng.sample(docs, len(docs)):
        lines = [x.strip() for x in doc.splitlines() if 8 <= len(x.split()) <= 30 and "[" not in x]
        if not lines:
            continue
        words = rng.choice(lines).split()
        cands = [i for i, w in enumerate(words[1:], 1) if re.fullmatch(r"[a-z]{3,}", w)
                 and len(tokenizer.encode(" " + w)) == 1]
        if cands:
            i = rng.choice(cands)
            out.append((" ".join(words[:i] + ["[MASK]"] + words[i + 1:]), words[i]))
        if len(out) == n:
            return out
    return out


def test_fill_mask_pipeline_predicts_what_our_model_predicts(tiny_pretrained, tmp_path):
    """transformers' fill-mask pipeline on the exported main-job model returns this codebase's
    own top-5 for every held-out sentence (tokenizer, [MASK] handling, RoPE layout, head)."""
    export_lib.export(tiny_pretrained, str(tmp_path / "hf"))
    fill = T.pipeline("fill-mask", model=str(tmp_path / "hf"), top_k=5, device="cpu")
    p = sources.load(tiny_pretrained)
    tok, cfg = p.tokenizer, p.model_cfg
    model = models.MaskedLM(models.freeze(cfg))
    sentences = held_out_masked_sentences(tok)
    assert len(sentences) == 30
    rows = []
    for text, _ in sentences:
        left, right = text.split("[MASK]")
        ids = [tok.cls_id] + tok.encode(left) + [tok.mask_id] + tok.encode(right) + [tok.sep_id]
        assert fill.tokenizer(text)["input_ids"] == ids, text
        rows.append(ids)
    # one jitted call over the padded batch (an eager apply per sentence took 90 s)
    width = max(map(len, rows))
    arr = np.full((len(rows), width), tok.pad_id, np.int32)
    mask = np.zeros_like(arr)
    for i, ids in enumerate(rows):
        arr[i, :len(ids)], mask[i, :len(ids)] = ids, 1
    at = np.asarray([[ids.index(tok.mask_id)] for ids in rows], np.int32)
    out, _ = jax.jit(lambda params: model.apply({"params": params}, arr, arr * 0, mask,
                                                mlm_positions=at))(p.params)
    all_logits = np.asarray(out["mlm_logits"])[:, 0]
    hits = ours_hits = 0
    for (text, word), logits in zip(sentences, all_logits):
        ours = list(np.argsort(-logits, kind="stable")[:5])
        theirs = [r["token"] for r in fill(text)]
        assert theirs == ours or np.allclose(np.sort(logits[theirs]), np.sort(logits[ours]),
                                             atol=1e-5), text  # equal up to exact logit ties
        word_id = tok.encode(" " + word)[0]
        hits += word_id in theirs
        ours_hits += word_id in ours
    assert hits == ours_hits
    print(f"fill-mask top-5 contains the word in {hits}/{len(sentences)} held-out sentences "
          "(6-step model; the README main job reaches 13/40, BUILD_NOTES)")
