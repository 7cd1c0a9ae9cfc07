"""BERT-large (Devlin et al. 2019): bert_base's recipe at 24 layers, 1024 wide, 16 heads,
4096 FFN; 340M parameters. `attention_dropout=0` is the kernel-friendly variant."""
from encoder import config as config_lib
from experiments import bert_base, pop_attention_dropout


def get_config(arg=None):
    arg, attention_dropout = pop_attention_dropout(arg, 0.1)
    config = bert_base.get_config(f"attention_dropout={attention_dropout}")
    config_lib.OPTIONS["size"](config, "large")
    return config_lib.finalize(config, arg)
