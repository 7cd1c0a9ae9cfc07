"""Every numeric config field's range, in one table, checked before anything is built.

`RANGES` maps a dotted field name to its `Range`: an integer or a real number, always
finite, between a lower and an upper bound (each open or closed), plus the values outside
it that mean something of their own (-1: "by the model's size", "the newest"). The table
covers every config a job reads: pretraining (encoder/config.py base_config and its
model), fine-tuning, evaluate and embed (encoder/finetune/config.py), their masking,
ELECTRA and contrastive options, each phase's own fields and each declared evaluator's
options.

`check(config, where)` walks a config, refuses the first number out of its range in one
ValueError naming the field, the value and the range (and, through `where`, the variant
or phase), then applies `RULES`: the few checks between fields that a table cannot hold.
A rule either refuses or warns (one line on stderr, said once per process). A field not
in the table is listed in `EXEMPT` with its reason (tests/test_ranges.py walks every
shipped config and finds each number in one of the two); NaN and infinity are refused in
every numeric field, listed or not (`nan < 0` is false: the bounds are read through
math.isfinite first).

Names: `evals.*.X` is option X of any declared evaluator (config.evals.NAME.X), and
`data.sources.*.X` field X of any source of a mixture;
`phases[].steps` and `phases[].tokens` are a phase's budget; a field a phase sets
(phases[i].train.learning_rate) has the range of the field it sets, and is named with
its phase.

This module is plain data and imports nothing of the library (config rank): a job
validates, a study checks each variant, the phase planner checks each phase's config, all
through `check`.
"""
import dataclasses
import math
import numbers
import sys
from typing import Any, Callable, Iterator

from encoder import errors


@dataclasses.dataclass(frozen=True)
class Range:
    """Finite, integer or real, within [low, high] (either end open); `special` values
    outside the range are accepted with their meaning; `why` says what a bound means."""
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    special: tuple = ()            # ((value, meaning), ...)
    why: str = ""

    def admits(self, value) -> bool:
        if any(value == v for v, _ in self.special):
            return True
        if not math.isfinite(value):
            return False
        if self.integer and value != int(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self) -> str:
        """'an integer >= 1', 'a number in [0, 1)', 'a finite number >= 0', then what a
        bound means and the special values: '... (why), or -1 (auto)'."""
        kind = "an integer" if self.integer else "a number"
        lo, hi = math.isfinite(self.low), math.isfinite(self.high)
        if lo and hi:
            text = (f"{kind} in {'(' if self.low_open else '['}{_num(self.low)}, "
                    f"{_num(self.high)}{')' if self.high_open else ']'}")
        elif lo or hi:
            kind = kind if self.integer else "a finite number"
            text = (f"{kind} {'>' if self.low_open else '>='} {_num(self.low)}" if lo else
                    f"{kind} {'<' if self.high_open else '<='} {_num(self.high)}")
        else:
            text = "a finite integer" if self.integer else "a finite number"
        if self.why:
            text += f" ({self.why})"
        for value, meaning in self.special:
            text += f", or {_num(value)} ({meaning})"
        return text


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def integer(low: float = -math.inf, high: float = math.inf, special: tuple = (),
            why: str = "") -> Range:
    return Range(low, high, integer=True, special=special, why=why)


def real(low: float = -math.inf, high: float = math.inf, low_open: bool = False,
         high_open: bool = False, special: tuple = (), why: str = "") -> Range:
    return Range(low, high, low_open, high_open, special=special, why=why)


COUNT = integer(0)                 # a number of things, 0 allowed (0: none / off / auto)
POSITIVE = integer(1)              # a number of things, at least one
RATE = real(0.0)                   # a finite non-negative real (0: off)
SCALE = real(0.0, low_open=True)   # a finite positive real (0 would divide by zero or
#                                    switch the thing off while claiming to run it)
SHARE = real(0.0, 1.0)             # a fraction of something, both ends meaningful
DROPOUT = real(0.0, 1.0, high_open=True,
               why="1 drops every unit: nothing is learned and nothing is predicted")
MOMENTUM = real(0.0, 1.0, high_open=True,
                why="1 never updates the moment: Adam divides by 1 - b^t = 0")

_MASKING = {
    "rate": real(0.0, 1.0, True, True, why="0 masks nothing; 1 leaves no visible token "
                                           "to predict from"),
    "mask_prob": SHARE,            # of the selected: [MASK] (mask_prob + random_prob <= 1)
    "random_prob": SHARE,          # of the selected: a random token
    # a word starts a new span with probability span_p: 0 never starts one (nothing is
    # masked), 1 makes every word its own span (whole-word masking), above 1 is not a
    # probability
    "span_p": real(0.0, 1.0, low_open=True,
                   why="0 starts no span: nothing is masked; 1 is whole-word masking"),
}

# The table: one entry per numeric field of every config (dotted name -> Range).
RANGES: dict[str, Range] = {
    # --- run identity
    "seed": integer(0, 2**31 - 1),
    "init_step": integer(-1, why="-1: the newest checkpoint"),
    # --- model (pretraining's, and fine-tuning's when it starts from scratch)
    "model.vocab_size": POSITIVE,
    "model.real_vocab_size": COUNT,          # 0: every row is a token (<= vocab_size: models)
    "model.hidden_size": POSITIVE,
    "model.num_layers": POSITIVE,
    "model.num_heads": POSITIVE,
    "model.intermediate_size": POSITIVE,
    "model.embedding_size": COUNT,           # 0: the hidden size (<= hidden_size: models)
    "model.type_vocab_size": COUNT,          # 0: no token types (ModernBERT, DeBERTa-v3)
    "model.max_position": POSITIVE,
    "model.rope_theta": real(0.0, low_open=True, why="the rotary base: 0 gives NaN angles"),
    "model.local_rope_theta": RATE,          # 0: rope_theta
    # T5's buckets: a quarter are exact offsets per direction, so fewer than 4 leave none
    # and the log-spaced rest divide by zero
    "model.t5_num_buckets": integer(4, why="a quarter of them are exact offsets"),
    "model.t5_max_distance": POSITIVE,       # > t5_num_buckets // 4: rule t5_reach
    "model.deberta_position_buckets": COUNT,  # 0: no bucketing; 1 refused by models
    "model.deberta_max_relative_positions": POSITIVE,
    "model.layer_norm_eps": real(0.0, low_open=True,
                                 why="0 divides by zero on a constant row"),
    "model.dropout": DROPOUT,
    "model.attention_dropout": DROPOUT,
    "model.local_window": COUNT,             # 0: global; even: models; vs seq_len: a rule
    "model.global_every": COUNT,             # 0: no global layer among the local ones
    "model.initializer_range": real(0.0, low_open=True,
                                    why="0 starts every weight at zero: the layers are "
                                        "identical and stay so"),
    # --- masking (pretraining, and the evaluate job's protocol)
    **{f"masking.{k}": v for k, v in _MASKING.items()},
    **{f"eval.masking.{k}": v for k, v in _MASKING.items()},
    # --- ELECTRA
    "electra.generator_fraction": real(0.0, 1.0, low_open=True,
                                       why="the generator's width over the discriminator's"),
    "electra.generator_layers": COUNT,       # 0: the discriminator's depth
    "electra.disc_weight": real(0.0, low_open=True,
                                why="lambda = 0 trains no discriminator"),
    "electra.temperature": SCALE,
    # --- data
    "data.seq_len": POSITIVE,                # pretraining asks for >= 8 (its own check)
    "data.vocab_multiple": POSITIVE,         # 1: no padding rows
    "data.tokenizer_sample_chars": POSITIVE,
    "data.valid_fraction": real(0.0, 1.0, high_open=True,
                                why="1 holds every document out: nothing is left to train on"),
    "data.max_line_chars": POSITIVE,
    "data.max_skipped_share": SHARE,         # 0: nothing may be dropped; 1: accept anything
    "data.max_held_out_overlap": SHARE,      # 0: no held-out row may be a training row
    "data.temperature": real(0.0, 1.0, why="beyond 1 large sources would be upsampled past "
                                           "their size"),   # 0: the weights as given
    "data.sources.*.weight": RATE,           # 0: the source is off (one must be > 0: mixture)
    "data.max_seq_len": integer(3, why="[CLS], [SEP] and at least one token"),
    "data.doc_stride": POSITIVE,
    "data.max_answer_tokens": POSITIVE,
    # --- training (pretraining and fine-tuning share the names)
    "train.num_steps": COUNT,                # 0: fine-tuning counts epochs; pretraining >= 1
    "train.num_epochs": COUNT,               # 0: by the model's size
    "train.batch_size": POSITIVE,
    "train.grad_accum_steps": POSITIVE,
    "train.learning_rate": RATE,             # 0: fine-tuning picks it; pretraining: a rule
    "train.warmup_steps": COUNT,
    "train.end_learning_rate_fraction": SHARE,
    "train.decay_steps": COUNT,              # 0: decay_fraction of the steps
    "train.decay_fraction": SHARE,
    "train.ema_decay": real(0.0, 1.0, high_open=True, why="1 never moves the average"),
    "train.batch_warmup_tokens": COUNT,
    "train.batch_warmup_start": COUNT,       # 0: one micro-batch
    "train.batch_warmup_increment": COUNT,   # 0: one micro-batch
    "train.time_budget_s": RATE,             # 0: no budget
    "train.b1": MOMENTUM,
    "train.b2": MOMENTUM,
    "train.eps": real(0.0, low_open=True, why="0 divides by zero where a gradient has "
                                              "always been zero"),
    "train.weight_decay": RATE,
    "train.clip_norm": RATE,                 # 0: no clipping
    "train.log_every": POSITIVE,
    "train.eval_every": COUNT,               # 0: no evaluation
    "train.eval_batches": COUNT,             # >= 1 when eval_every > 0 (pretrain.validate)
    "train.checkpoint_every": COUNT,         # fine-tuning 0: each epoch's end
    "train.keep_checkpoints": POSITIVE,
    "train.peak_flops": RATE,                # 0: measured or the datasheet's
    "train.debug_nan_at_step": integer(why="a testing hook; negative: off"),
    # --- fine-tuning
    "finetune.lora_rank": POSITIVE,
    "finetune.lora_alpha": real(0.0, low_open=True, why="0 scales the adapters to nothing"),
    "finetune.layer_decay": real(0.0, 1.0, low_open=True,
                                 why="0 freezes every layer below the top"),
    "finetune.warmup_fraction": real(0.0, 1.0, high_open=True,
                                     why="1 never leaves the warmup"),
    "finetune.dropout": real(0.0, 1.0, high_open=True, special=((-1, "by the model's size"),),
                             why="1 drops every unit: nothing is learned"),
    # --- contrastive (retrieval) options
    "contrastive.temperature": SCALE,
    "contrastive.cache_chunk": COUNT,        # 0: no GradCache
    "contrastive.num_negatives": COUNT,
    "contrastive.colbert_dim": COUNT,        # > 0 with head=colbert (retrieval/options.py)
    "contrastive.in_batch_weight": RATE,     # x the in-batch loss beside a distillation one
    "contrastive.distill_temperature": SCALE,  # kl's T: teacher and student logits / T
    "contrastive.flops_query_weight": RATE,  # SPLADE's lambda_q (0: queries unregularised)
    "contrastive.flops_doc_weight": RATE,    # lambda_d
    "contrastive.flops_warmup_steps": COUNT,  # 0: the full weight from the first step
    "contrastive.sparse_top_terms": COUNT,   # 0: every non-zero term kept in the index
    # --- evaluate and embed
    "eval.max_tokens": POSITIVE,
    "eval.batch_size": POSITIVE,
    "eval.masking_seed": integer(0, 2**31 - 1),
    "eval.top_k": POSITIVE,
    # --- devices and processes
    "mesh.data": integer(1, special=((-1, "the devices the other axes leave"),)),
    "mesh.fsdp": integer(1, special=((-1, "the devices the other axes leave"),)),
    "distributed.num_processes": COUNT,      # 0: one process, or the cluster's
    "distributed.process_id": integer(-1),   # -1: the cluster's
    # --- a phase's budget (encoder/train/phases.py: exactly one of the two is non-zero)
    "phases[].steps": COUNT,
    "phases[].tokens": RATE,
    # --- declared evaluators (encoder/jobs/evals.py)
    "evals.*.every": COUNT,                  # 0: train.checkpoint_every
    "evals.*.batches": POSITIVE,
    "evals.*.max_len": COUNT,                # 0: the run's seq_len
    "evals.*.max_eval": COUNT,
    "evals.*.max_train": COUNT,
}

# Numeric fields with no range here, and why (each still must be finite).
EXEMPT: dict[str, str] = {
    "evals.*.layer": "its bounds are the model's layers: encoder/jobs/evals.py checks it "
                     "against model.num_layers (negative counts from the top)",
}


# ------------------------------------------------------------------------------ the walk

@dataclasses.dataclass(frozen=True)
class Field:
    name: str       # as the user writes it: model.dropout, evals.sts.max_len
    key: str        # its entry in RANGES / EXEMPT: evals.*.max_len
    value: Any
    where: str = ""  # phases[1] ('decay')


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _items(node):
    if hasattr(node, "to_dict") and not hasattr(node, "items"):
        node = node.to_dict()
    return node.items() if hasattr(node, "items") else ()


def _leaves(node, path: str) -> Iterator[tuple[str, Any]]:
    for k, v in _items(node):
        name = f"{path}.{k}" if path else str(k)
        if hasattr(v, "items") or hasattr(v, "to_dict"):
            yield from _leaves(v, name)
        else:
            yield name, v


# Groups whose entries the user names (config.evals.NAME, data.sources.NAME): the table
# holds one range per option, for every name.
NAMED = ("evals", "data.sources")


def key_of(name: str) -> str:
    """The table's name for a field: an entry's own name becomes `*` (evals.sts.max_len ->
    evals.*.max_len)."""
    for group in NAMED:
        rest = name[len(group) + 1:].split(".") if name.startswith(group + ".") else []
        if len(rest) == 2:
            return f"{group}.*.{rest[1]}"
    return name


def fields(config) -> Iterator[Field]:
    """Every number in a config (a ConfigDict or a dict), with its table key; a phase's
    fields as the fields they set, named with their phase. None (a field the source fills,
    experiments/continue.py) is not a number yet."""
    for name, value in _leaves(config, ""):
        if name == "phases":
            yield from _phase_fields(value)
        elif _is_number(value):
            yield Field(name, key_of(name), value)


def _phase_fields(phases) -> Iterator[Field]:
    for i, p in enumerate(phases or ()):
        p = p.to_dict() if hasattr(p, "to_dict") else p
        if not isinstance(p, dict):
            continue  # refused, with its shape, by the phase planner
        where = f"phases[{i}] ({p.get('name', '?')!r})"
        for k, v in p.items():
            if hasattr(v, "items"):
                for name, leaf in _leaves(v, k):
                    if _is_number(leaf):
                        yield Field(name, key_of(name), leaf, where)
            elif _is_number(v):
                yield Field(k, f"phases[].{k}", v, where)


def problem(f: Field) -> str:
    """Why a field's value is refused ('' when it is in range)."""
    value = f.value
    spec = RANGES.get(f.key)
    if spec is None:
        return "" if math.isfinite(value) else (f"{f.name} must be a finite number, got "
                                                f"{value!r}")
    if spec.admits(value):
        return ""
    return f"{f.name} must be {spec.describe()}, got {value!r}"


# ------------------------------------------------------------------------------ the rules

def _get(config, dotted: str, default=None):
    node = config
    for part in dotted.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError, AttributeError):
            return default
        if node is None:
            return default
    return node


def _mode(config) -> str:
    return _get(config, "mode", "pretrain")


def _heads_divide_width(config) -> str:
    width, heads = _get(config, "model.hidden_size"), _get(config, "model.num_heads")
    if not width or not heads or width % heads == 0:
        return ""
    return (f"model.hidden_size {width} is not divisible by num_heads {heads} "
            f"(model.num_heads={heads}: each head takes hidden_size / num_heads dimensions)")


def _t5_reach(config) -> str:
    if _get(config, "model.position") != "t5_bias":
        return ""
    reach, buckets = _get(config, "model.t5_max_distance"), _get(config, "model.t5_num_buckets")
    if reach is None or buckets is None or reach > buckets // 4:
        return ""
    return (f"model.t5_max_distance={reach} must exceed t5_num_buckets // 4 = {buckets // 4} "
            "(the exact offsets): the log-spaced buckets reach from there to it")


def _replacement_within_one(config) -> str:
    for section in ("masking", "eval.masking"):
        mask, rand = _get(config, f"{section}.mask_prob"), _get(config, f"{section}.random_prob")
        if mask is not None and rand is not None and mask + rand > 1:
            return (f"{section}.mask_prob + random_prob must be within [0, 1], got {mask} + "
                    f"{rand}: they are shares of the same selected tokens")
    return ""


def _warmup_shorter_than_run(config) -> str:
    warmup, steps = _get(config, "train.warmup_steps", 0), _get(config, "train.num_steps", 0)
    if _get(config, "phases") or not warmup or not steps or warmup < steps:
        return ""
    return (f"train.warmup_steps={warmup} is not shorter than the run (train.num_steps="
            f"{steps}): the learning rate would never reach its peak; lower warmup_steps")


def _learning_rate_moves_nothing(config) -> str:
    if _get(config, "train.learning_rate", 1.0) != 0:
        return ""
    return ("train.learning_rate=0: the parameters never move, so this run pretrains "
            "nothing (its figures are the starting point's); give a positive rate to train")


def _window_wider_than_rows(config) -> str:
    window, seq = _get(config, "model.local_window", 0), _get(config, "data.seq_len", 0)
    if not window or not seq or window // 2 < seq - 1:
        return ""
    return (f"model.local_window={window} reaches every token of a data.seq_len={seq} row "
            f"(it keeps |i - j| <= {window // 2}): its local layers attend globally, as "
            "local_window=0 would; give a window below 2 * (seq_len - 1) for local attention")


@dataclasses.dataclass(frozen=True)
class Rule:
    """A check between fields: `find(config)` -> what is wrong ('' when nothing is)."""
    name: str
    find: Callable[[Any], str]
    modes: tuple = ("pretrain", "finetune", "evaluate", "embed")
    refuse: bool = True            # False: a warning line, and the run goes on
    whole_run: bool = False        # about the run as a whole (not about one phase of it)


RULES: tuple[Rule, ...] = (
    Rule("heads_divide_width", _heads_divide_width),
    Rule("t5_reach", _t5_reach),
    Rule("replacement_within_one", _replacement_within_one),
    Rule("warmup_shorter_than_run", _warmup_shorter_than_run, ("pretrain",), whole_run=True),
    # a learning rate of 0 has a use (measuring a source under the run's protocol), so it
    # is said, not refused
    Rule("learning_rate_moves_nothing", _learning_rate_moves_nothing, ("pretrain",),
         refuse=False),
    # continuing a model with local layers on short rows is legitimate: said, not refused
    Rule("window_wider_than_rows", _window_wider_than_rows, ("pretrain",), refuse=False),
)

_said: set = set()  # warnings already printed by this process (validation runs repeatedly)


def _warn(line: str) -> None:
    if line not in _said:
        _said.add(line)
        print(f"warning: {line}", file=sys.stderr, flush=True)


def check(config, where: str = "", whole_run: bool = True) -> list[str]:
    """Refuses the first number out of its range, then the first broken rule, in one
    errors.UsageError (a ValueError) naming the field, its value and its range; `where`
    (a variant, a phase) leads the message. Returns the warnings, each also printed once.
    whole_run=False: a part of a run (one phase's config), whose run-wide rules are the
    run's to check."""
    lead = f"{where}: " if where else ""
    for f in fields(config):
        found = problem(f)
        if found:
            raise errors.UsageError(lead + (f"{f.where}: " if f.where else "") + found)
    warnings = []
    for rule in RULES:
        if _mode(config) not in rule.modes or (rule.whole_run and not whole_run):
            continue
        found = rule.find(config)
        if found and rule.refuse:
            raise errors.UsageError(lead + found)
        if found:
            warnings.append(lead + found)
            _warn(lead + found)
    return warnings
