"""mmBERT-style base (Marone et al. 2025): ModernBERT-base's architecture and optimizer,
trained in three phases with a masking-rate schedule that falls as training goes on
(30% -> 15% -> 5%): pretraining at 1,024 tokens (RoPE base 1e4), a mid-training phase that
extends the context to 8,192 (RoPE base 1.6e5), and a decay phase.

Data: mmBERT's annealed language learning samples its languages with a temperature over
their sizes (p_i ~ n_i^tau, XLM-R's rule: a lower tau flattens towards uniform) that falls
0.7 -> 0.5 -> 0.3 by phase, and adds languages by phase: 60 in pretraining, 110 from
mid-training on, all 1,833 in the decay. Here a source is a group of languages by when it
enters (SOURCES: `high`, the 60; `mid`, the 50 mid-training adds; `low`, the 1,723 the
decay adds), each declared from the start (weight 0 until its phase, so the run's
tokenizer sees every language) and sampled by the phase's temperature; one source per
language (an experiment file of your own) follows the paper to the letter. Each group's
files: --config.data.sources.GROUP.files=PATH; a group without files reads the embedded
corpus, as runlocal does. mmBERT runs its decay on three mixtures and merges the three
decayed models; here each is a run of this recipe started from the mid-training
checkpoint (init_from=..., init_state=full) with its decay's sources, merged with
`python -m encoder merge --workdirs=A,B,C`.

The phase budgets (2.3T, 600B, 100B tokens) and rates are the paper's; the batch sizes,
learning rates and the decay's 1-sqrt shape are modernbert_base's (assumed, not checked
against mmBERT's configs). The vocabulary stays modernbert_base's: a tokenizer is the
data's choice (data.tokenizer), not this recipe's.
"""
from encoder import config as config_lib
from experiments import modernbert_base

SOURCES = dict(high=config_lib.mixture_source(), mid=config_lib.mixture_source(weight=0.0),
               low=config_lib.mixture_source(weight=0.0))
TEMPERATURES = (0.7, 0.5, 0.3)  # pretraining, mid-training, decay

PHASES = (
    dict(name="pretrain", tokens=2_300_000_000_000, model=dict(rope_theta=10000.0),
         masking=dict(rate=0.3), data=dict(temperature=TEMPERATURES[0]),
         train=dict(schedule="constant", grad_accum_steps=6, batch_warmup_tokens=50_000_000_000,
                    batch_warmup_start=768, batch_warmup_increment=768)),
    dict(name="midtrain", tokens=600_000_000_000, data=dict(
        seq_len=8192, temperature=TEMPERATURES[1], sources=dict(mid=dict(weight=1.0))),
         masking=dict(rate=0.15),
         train=dict(learning_rate=3e-4, schedule="constant", warmup_steps=0, batch_size=576)),
    dict(name="decay", tokens=100_000_000_000, masking=dict(rate=0.05), data=dict(
        seq_len=8192, temperature=TEMPERATURES[2],
        sources=dict(mid=dict(weight=1.0), low=dict(weight=1.0))),
         train=dict(learning_rate=3e-4, schedule="wsd", warmup_steps=0, decay_fraction=1.0,
                    decay_shape="1-sqrt", batch_size=576)),
)


def get_config(arg=None):
    config = modernbert_base.get_config()
    config.data.update(sources=SOURCES, temperature=TEMPERATURES[0])
    config.phases = PHASES
    return config_lib.finalize(config, arg)
