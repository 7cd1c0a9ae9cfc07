"""ModernBERT-large (Warner et al. 2024): modernbert_base's recipe at 28 layers, 1024 wide,
16 heads, GeGLU FFN 2624; 395M parameters (HF answerdotai/ModernBERT-large's config)."""
from encoder import config as config_lib
from experiments import modernbert_base


def get_config(arg=None):
    config = modernbert_base.get_config()
    config.model.update(dict(size="large", num_layers=28, hidden_size=1024, num_heads=16,
                             intermediate_size=2624))
    config.train.update(dict(learning_rate=5e-4))
    return config_lib.finalize(config, arg)
