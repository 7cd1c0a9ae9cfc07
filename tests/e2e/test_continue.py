"""experiments/continue.py on HF folders made by transformers (BERT, RoBERTa, ModernBERT,
DeBERTa-v3, ELECTRA's generator), each with a byte-level BPE tokenizer trained here: the
model and tokenizer come from the folder, the run starts from exactly its parameters and
exports back to a folder whose logits equal the original's."""
import importlib
import json
import os
import sys

import jax
import numpy as np
import pytest

from helpers import ROOT, TORCH_GROUP, LazyModule

pytestmark = [pytest.mark.e2e, TORCH_GROUP]

torch, T = LazyModule("torch"), LazyModule("transformers")
V = 320  # the byte-level tokenizer's vocabulary (256 bytes, 5 specials, some merges)
SMALL = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0, pad_token_id=0)
FAMILIES = {
    "bert": ("BertConfig", "BertForMaskedLM", {}),
    "roberta": ("RobertaConfig", "RobertaForMaskedLM", {"max_position_embeddings": 130}),
    "electra": ("ElectraConfig", "ElectraForMaskedLM", {"embedding_size": 16}),
    "deberta_v3": ("DebertaV2Config", "DebertaV2ForMaskedLM", dict(
        relative_attention=True, position_buckets=8, max_relative_positions=16,
        pos_att_type="p2c|c2p", norm_rel_ebd="layer_norm", share_att_key=True,
        position_biased_input=False, layer_norm_eps=1e-7)),
    "modernbert": ("ModernBertConfig", "ModernBertForMaskedLM", dict(
        global_attn_every_n_layers=2, local_attention=8, cls_token_id=2, sep_token_id=3,
        bos_token_id=2, eos_token_id=3, attn_implementation="eager",
        hidden_dropout_prob=None, attention_probs_dropout_prob=None)),
}


def continue_config(arg="runlocal"):
    sys.path.insert(0, ROOT)
    return importlib.import_module("experiments.continue").get_config(arg)


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    from encoder.data import corpus
    docs = [d for d in corpus.stdlib_documents()[::5] if len(d) > 200][:400]
    path = tmp_path_factory.mktemp("text") / "domain.txt"
    path.write_text("\n\n".join(docs))
    return docs, str(path)


def _hf_folder(family, folder, docs):
    from encoder.data import tokenizer as tokenizer_lib
    tokenizer_lib.train_byte_bpe(docs, str(folder), V)
    config_name, model_name, extra = FAMILIES[family]
    kwargs = {k: v for k, v in {**SMALL, **extra}.items() if v is not None}
    torch.manual_seed(0)
    model = getattr(T, model_name)(getattr(T, config_name)(**kwargs)).eval()
    with torch.no_grad():  # every weight away from its init, so parity tests each tensor
        gen = torch.Generator().manual_seed(1)
        for _, p in model.named_parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(str(folder))
    return model


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids),
                     attention_mask=torch.ones_like(torch.tensor(ids))).logits.numpy()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_continue_starts_from_the_folder_and_exports_back(family, texts, tmp_path):
    from encoder.jobs import export, pretrain
    docs, text = texts
    src = _hf_folder(family, tmp_path / "hf", docs)
    config = continue_config()
    config.init_from = f"hf:{tmp_path / 'hf'}"
    config.data.train_files = text
    # learning rate 0: two real steps that must leave the parameters as they came
    config.train.update(dict(num_steps=2, learning_rate=0.0, eval_every=2, checkpoint_every=2,
                             log_every=1, eval_batches=1))
    result = pretrain.train(config, str(tmp_path / "run"), devices=jax.devices()[:1])
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert rows[0]["step"] == 0 and "eval/mlm_loss" in rows[0]  # the source's own figure
    # the parameters did not move: the run's last held-out loss is its step-0 loss
    assert result["eval/mlm_loss"] == pytest.approx(rows[0]["eval/mlm_loss"], abs=1e-5)
    assert os.path.exists(tmp_path / "run" / "tokenizer" / "tokenizer.json")  # copied
    export.export(str(tmp_path / "run"), str(tmp_path / "back"))
    back = T.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "back")).eval()
    tok = T.AutoTokenizer.from_pretrained(str(tmp_path / "back"))
    ids = [tok(d[:200])["input_ids"][:48] for d in docs[:4]]
    ids = np.array([x + [0] * (48 - len(x)) for x in ids])
    diff = np.abs(_logits(back, ids) - _logits(src, ids)).max()
    print(f"{family}: exported logits within {diff:.1e}")
    assert diff < 1e-4


def test_a_field_that_changes_the_function_is_refused_and_one_named_runs(texts, tmp_path):
    from encoder.jobs import pretrain
    docs, text = texts
    _hf_folder("bert", tmp_path / "hf", docs)
    config = continue_config()
    config.init_from = f"hf:{tmp_path / 'hf'}"
    config.data.train_files = text
    config.model.norm = "pre_ln"  # BERT is post-LN: same names, another function
    with pytest.raises(ValueError, match=r"model.norm: 'pre_ln' here, 'post_ln' in the source"):
        pretrain.train(config, str(tmp_path / "run"), devices=jax.devices()[:1])
    config = continue_config()
    config.init_from = f"hf:{tmp_path / 'hf'}"
    config.data.train_files = text
    config.model.dropout = 0.0  # a runtime field: no change to the function
    config.train.update(dict(num_steps=2, eval_every=2, checkpoint_every=2))
    pretrain.train(config, str(tmp_path / "ok"), devices=jax.devices()[:1])


def test_a_recipe_phase_takes_its_schedule_length_and_masking():
    c = continue_config("recipe=modernbert_base,phase=decay")
    assert (c.train.schedule, c.train.decay_shape, c.data.seq_len, c.masking.rate) == (
        "wsd", "1-sqrt", 8192, 0.3)
    assert c.model.hidden_size is None and c.model.rope_theta is None  # from the source
    stable = continue_config("recipe=modernbert_base,phase=stable")
    assert stable.model.rope_theta == 10000.0 and stable.init_allow == "rope_theta"
    with pytest.raises(ValueError, match="its phases: stable, extension, decay"):
        continue_config("recipe=modernbert_base,phase=nope")
