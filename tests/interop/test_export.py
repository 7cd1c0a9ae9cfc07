"""HuggingFace both ways for the BERT-layout families (BERT, RoBERTa, ALBERT, ELECTRA,
RoFormer): import parity against transformers' PyTorch forward, export parity after
from_pretrained, export -> import identity, the tokenizer, token and span heads, and
refusals (exports of trained and fine-tuned workdirs: tests/e2e/test_export_runs.py)."""
import os

import flax.linen as nn
import jax
import numpy as np
import pytest

from encoder import config as config_lib
from encoder.checkpoints import sources
from encoder.jobs import export as export_lib
from encoder.interop import hf, hf_tokenizer
from encoder.interop.family import Unrepresentable
from encoder.model import models
from helpers import TORCH_GROUP, LazyModule, awkward_texts, pair_batch

pytestmark = TORCH_GROUP  # imports torch (helpers.TORCH_GROUP)

torch, T = LazyModule("torch"), LazyModule("transformers")

SMALL = dict(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0)
# name -> (transformers' config class, its MLM class, extra config fields)
CASES = {
    "bert": ("BertConfig", "BertForMaskedLM", {}),
    "roberta": ("RobertaConfig", "RobertaForMaskedLM", {"pad_token_id": 1}),
    "albert_shared": ("AlbertConfig", "AlbertForMaskedLM", {"embedding_size": 16,
                                                            "hidden_act": "gelu_new"}),
    "albert_per_layer": ("AlbertConfig", "AlbertForMaskedLM", {"embedding_size": 16,
                                                               "num_hidden_groups": 2}),
    "electra_generator": ("ElectraConfig", "ElectraForMaskedLM", {"embedding_size": 16}),
    "roformer": ("RoFormerConfig", "RoFormerForMaskedLM", {"embedding_size": 32}),
}


def _torch_forward(model, ids, seg, mask):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(seg),
                    attention_mask=torch.tensor(mask), output_hidden_states=True)
    return out.hidden_states[-1].numpy(), out.logits.numpy()


def _ours(cfg, params, ids, seg, mask):
    model = models.MaskedLM(models.freeze(cfg))
    out, aux = model.apply({"params": params}, ids.astype(np.int32), seg.astype(np.int32),
                           mask.astype(np.int32))
    return np.asarray(aux["encoded"]), np.asarray(out["mlm_logits"])


def _randomize(model):
    """Every weight random (LayerNorm scales and biases too), so parity tests every
    tensor; RoFormer's sinusoidal table is a buffer-like weight and stays."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1 + (1.0 if name.endswith(
                    ("LayerNorm.weight", "layer_norm.weight", "full_layer_layer_norm.weight"))
                    else 0.0))
    return model.eval()


@pytest.mark.parametrize("case", sorted(CASES))
def test_hf_model_imports_with_hidden_state_and_logit_parity(case, tmp_path):
    config_name, model_name, extra = CASES[case]
    config_cls, model_cls = getattr(T, config_name), getattr(T, model_name)
    torch.manual_seed(0)
    model = _randomize(model_cls(config_cls(**{**SMALL, **extra})))
    model.save_pretrained(tmp_path)
    cfg, params = hf.load(str(tmp_path))
    ids, seg, mask = pair_batch(extra.get("pad_token_id", 0))
    ref_hidden, ref_logits = _torch_forward(model, ids, seg, mask)
    hidden, logits = _ours(cfg, params, ids, seg, mask)
    real = mask.astype(bool)
    print(f"{case}: hidden {np.abs(hidden - ref_hidden)[real].max():.1e}, "
          f"logits {np.abs(logits - ref_logits)[real].max():.1e}")
    assert np.abs(hidden - ref_hidden)[real].max() <= 1e-4
    assert np.abs(logits - ref_logits)[real].max() <= 1e-4
    assert cfg.share_layers == (case == "albert_shared")


def _our_model_cfg(**over):
    cfg = config_lib.model_config("tiny")
    cfg.update(vocab_size=101, hidden_size=32, num_heads=4, intermediate_size=64, max_position=64,
               dropout=0.0, attention_dropout=0.0)
    cfg.update(over)
    return cfg


def _perturbed_params(cfg, seed=0):
    """Our MaskedLM's initial parameters with noise on every leaf (no LayerNorm at 1/0)."""
    ids = np.ones((1, 8), np.int32)
    params = nn.unbox(models.MaskedLM(models.freeze(cfg)).init(
        jax.random.key(seed), ids, ids * 0, ids)["params"])
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: np.asarray(x) + rng.normal(0, 0.05, x.shape).astype(np.float32),
                        params)


OUR_CASES = {
    "bert": {}, "roberta": {}, "roformer": {"position": "rope"},
    "albert": {"embedding_size": 16, "share_layers": True},
    "electra": {"embedding_size": 16},
}
EXPORT_CASES = [(f, OUR_CASES[f]) for f in sorted(OUR_CASES)] + [
    ("albert", {"share_layers": True}),  # E == D: ALBERT's projection exported as the identity
    ("bert", {"tie_embeddings": False, "type_vocab_size": 0}),
]


@pytest.mark.parametrize("family,options", EXPORT_CASES)
def test_our_model_exports_loads_with_from_pretrained_and_imports_back_identically(
        family, options, tmp_path):
    cfg = _our_model_cfg(**options)
    params = _perturbed_params(cfg)
    written = hf.write_folder(str(tmp_path), family, cfg, params, "mlm")
    model, info = T.AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched tensor
    assert type(model).__name__ == written["architectures"][0]
    ids, seg, mask = pair_batch()
    if not cfg.type_vocab_size:  # no token types: the exported tokenizer gives zeros
        seg = np.zeros_like(seg)
    _, ref_logits = _torch_forward(model.eval(), ids, seg, mask)
    _, logits = _ours(cfg, params, ids, seg, mask)
    diff = np.abs(logits - ref_logits)[mask.astype(bool)].max()
    print(f"{family}: exported logits max diff {diff:.1e}")
    assert diff <= 1e-4
    cfg2, params2 = hf.load(str(tmp_path))
    assert jax.tree.structure(params2) == jax.tree.structure(params)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params2),
                                                    jax.tree.leaves(params)))
    for key in ("position", "embedding_size", "share_layers", "num_layers", "type_vocab_size"):
        assert cfg2[key] == cfg[key], key


def test_a_model_no_family_computes_is_refused_with_every_reason(tmp_path):
    cfg = _our_model_cfg(position="alibi")
    with pytest.raises(Unrepresentable) as err:
        hf.choose_family(cfg, "mlm")
    assert "bert: position=alibi" in str(err.value) and "roformer" in str(err.value)
    with pytest.raises(Unrepresentable, match="nearest family: roformer"):
        hf.write_folder(str(tmp_path / "x"), "bert", _our_model_cfg(position="rope"),
                        _perturbed_params(_our_model_cfg(position="rope")))
    assert not (tmp_path / "x").exists()  # refused before writing anything
    assert hf.choose_family(_our_model_cfg(position="rope")) == "roformer"
    assert hf.choose_family(_our_model_cfg(embedding_size=16, share_layers=True)) == "albert"


def test_export_never_replaces_what_it_did_not_write(tiny_pretrained, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("precious")
    for out in (tmp_path / "notes", tiny_pretrained, os.path.join(tiny_pretrained, "hf")):
        with pytest.raises(ValueError, match="--out="):
            export_lib.export(tiny_pretrained, str(out))
    assert (tmp_path / "notes" / "keep.txt").read_text() == "precious"
    assert os.path.isdir(os.path.join(tiny_pretrained, "checkpoints"))
    export_lib.export(tiny_pretrained, str(tmp_path / "hf"))
    export_lib.export(tiny_pretrained, str(tmp_path / "hf"))  # a previous export is replaced
    assert not (tmp_path / "hf.partial").exists()
    with pytest.raises(FileNotFoundError, match="is a HuggingFace folder: use hf:"):
        sources.load(str(tmp_path / "hf"))


def test_albert_with_a_trained_full_width_projection_is_refused(tmp_path):
    config = T.AlbertConfig(**{**SMALL, "embedding_size": 32})
    _randomize(T.AlbertForMaskedLM(config)).save_pretrained(tmp_path)
    with pytest.raises(Unrepresentable, match="trained embedding projection"):
        hf.load(str(tmp_path))


def _same_or_tied(tok, ours: list, theirs: list) -> bool:
    """Equal ids, or two segmentations of the same text with the same unigram score:
    sentencepiece and HF's Unigram break exact ties (a run of one repeated
    character: 'x'+'xxxx' vs 'xxxx'+'x') in different orders."""
    if ours == theirs:
        return True
    score = lambda ids: sum(tok.sp.get_score(i) for i in ids)  # noqa: E731
    return tok.decode(ours) == tok.decode(theirs) and abs(score(ours) - score(theirs)) < 1e-3


def test_autotokenizer_gives_this_codebases_ids_singles_and_pairs(tiny_pretrained, tmp_path):
    tok = sources.load(tiny_pretrained).tokenizer
    hf_tokenizer.write(tok, str(tmp_path), 512)
    auto = T.AutoTokenizer.from_pretrained(tmp_path)
    texts = awkward_texts()
    assert len(texts) >= 250
    ties = 0
    for a, b in zip(texts, texts[1:] + texts[:1]):
        b = b or "pair"  # an empty text_pair is no pair to transformers
        single = auto(a, add_special_tokens=False)["input_ids"]
        assert _same_or_tied(tok, tok.encode(a), single), a
        ties += single != tok.encode(a)
        ours = tok.encode_example(a, b, max_len=2048)
        n = int(ours["attention_mask"].sum())
        theirs = auto(a, b)
        assert _same_or_tied(tok, ours["input_ids"][:n].tolist(), theirs["input_ids"]), (a, b)
        assert len(theirs["input_ids"]) == n
        assert theirs["token_type_ids"] == ours["segment_ids"][:n].tolist()
    print(f"{len(texts)} texts, {ties} tied segmentations ordered differently")
    assert ties <= len(texts) // 20  # rare: runs of one repeated character
    # the special tokens by role, as the fill-mask pipeline and Trainer need them
    assert (auto.mask_token_id, auto.pad_token_id, auto.cls_token_id, auto.sep_token_id) == (
        tok.mask_id, tok.pad_id, tok.cls_id, tok.sep_id)
    assert auto("a [MASK] b")["input_ids"].count(tok.mask_id) == 1


@pytest.mark.parametrize("family,kind", [("bert", "token"), ("roformer", "span"),
                                         ("electra", "token"), ("albert", "span")])
def test_token_and_span_heads_export_with_logit_parity(family, kind, tmp_path):
    cfg = _our_model_cfg(**OUR_CASES[family])
    model = (models.TokenClassifier(models.freeze(cfg), num_labels=3) if kind == "token"
             else models.SpanExtractor(models.freeze(cfg)))
    ids, seg, mask = (a.astype(np.int32) for a in pair_batch())
    params = nn.unbox(model.init(jax.random.key(0), ids, seg, mask)["params"])
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda x: np.asarray(x) + rng.normal(0, 0.05, x.shape).astype(
        np.float32), params)
    labels = ["O", "B-X", "I-X"] if kind == "token" else None
    hf.write_folder(str(tmp_path), family, cfg, params, kind, labels=labels)
    auto = T.AutoModelForTokenClassification if kind == "token" else \
        T.AutoModelForQuestionAnswering
    ref, info = auto.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    with torch.no_grad():
        out = ref.eval()(input_ids=torch.tensor(ids, dtype=torch.long),
                         token_type_ids=torch.tensor(seg, dtype=torch.long),
                         attention_mask=torch.tensor(mask))
    ours, _ = model.apply({"params": params}, ids, seg, mask)
    real = mask.astype(bool)
    if kind == "token":
        assert np.abs(np.asarray(ours) - out.logits.numpy())[real].max() <= 1e-4
        assert ref.config.id2label == {0: "O", 1: "B-X", 2: "I-X"}
    else:
        for a, b in zip(ours, (out.start_logits, out.end_logits)):
            assert np.abs(np.asarray(a) - b.numpy())[real].max() <= 1e-4


def test_an_exported_folder_is_an_init_from_source_with_its_tokenizer(tiny_pretrained, tmp_path):
    export_lib.export(tiny_pretrained, str(tmp_path / "hf"))
    src, hf_src = sources.load(tiny_pretrained), sources.load(f"hf:{tmp_path / 'hf'}")
    assert hf_src.kind == "hf" and hf_src.model_cfg.position == "rope"
    # the run's vocabulary is padded to a multiple of 64; the export carries its real rows
    cfg, params = export_lib.unpadded(src.model_cfg, src.params)
    assert src.model_cfg.real_vocab_size == src.tokenizer.vocab_size < src.model_cfg.vocab_size
    assert hf_src.model_cfg.vocab_size == cfg.vocab_size == src.tokenizer.vocab_size
    for a, b in zip(jax.tree.leaves(hf_src.params["encoder"]),
                    jax.tree.leaves(params["encoder"])):
        np.testing.assert_array_equal(a, b)
    text = "Return the value of the named attribute of object."
    assert hf_src.tokenizer.encode(text) == src.tokenizer.encode(text)
    assert (hf_src.tokenizer.mask_id, hf_src.tokenizer.pad_id) == (src.tokenizer.mask_id,
                                                                  src.tokenizer.pad_id)
    starts = src.tokenizer.word_start_table()
    assert np.array_equal(hf_src.tokenizer.word_start_table(), starts)
