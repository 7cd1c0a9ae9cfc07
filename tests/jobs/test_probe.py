"""Per-layer probes find what is linearly in the features, and a shuffled-label control does not."""
import numpy as np

from encoder.checkpoints import sources
from encoder.jobs import probe


def _examples(n, seed):
    rng = np.random.default_rng(seed)
    words = ["file", "thread", "path", "string", "number", "list", "dict", "value"]
    out = []
    for i in range(n):
        w = [str(words[j]) for j in rng.integers(0, len(words), size=6)]
        has = i % 2 == 0
        w = [x for x in w if x != "socket"] + (["socket"] if has else [])
        rng.shuffle(w)
        out.append({"text": " ".join(w), "label": "yes" if has else "no", "_where": f"x:{i}"})
    return out


def test_a_token_present_is_found_and_the_control_is_at_chance(tiny_pretrained):
    src = sources.load(tiny_pretrained)
    train, dev = _examples(200, 0), _examples(100, 1)
    result = probe.probe_task(src.model_cfg, src.params, src.tokenizer, train, dev, max_len=32)
    layers = src.model_cfg.num_layers + 1
    assert len(result["layers"]) == len(result["control"]) == layers
    assert result["layers"][0] > 0.9  # bag of embeddings: the word's presence is linear
    assert max(result["control"]) < 0.75  # shuffled labels: nothing to find


def test_features_ignore_padding_and_batch_company(tiny_pretrained):
    src = sources.load(tiny_pretrained)
    ex = _examples(5, 2)
    together = probe.layer_features(src.model_cfg, src.params, src.tokenizer, ex, 32, 8)
    alone = probe.layer_features(src.model_cfg, src.params, src.tokenizer, ex[:1], 32, 8)
    assert together.shape == (src.model_cfg.num_layers + 1, 5, src.model_cfg.hidden_size)
    np.testing.assert_allclose(alone[:, 0], together[:, 0], atol=1e-5)
