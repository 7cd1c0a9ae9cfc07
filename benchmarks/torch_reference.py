"""HuggingFace's PyTorch masked LMs trained at this codebase's step configuration: the
reference a researcher would otherwise pick (python -m encoder bench --against=torch).

The model is the one `python -m encoder export` would write for the config
(encoder.interop: BertForMaskedLM for a BERT-shaped model, ModernBertForMaskedLM for
ModernBERT's), built from its HF config with random weights, so the shapes, vocabulary
and parameter count are the ones this codebase trains (the counts are compared by the
caller). The step is what a `transformers` user writes:

    masking on the device (DataCollatorForLanguageModeling's rule: each real, non-special
        token selected with probability masking.rate; of those mask_prob -> [MASK],
        random_prob -> a random token; labels -100 elsewhere)
    loss = model(ids, attention_mask, ..., labels=labels).loss   (masked slots only)
    loss.backward(); clip_grad_norm_ (when train.clip_norm > 0); AdamW.step()

in bf16 autocast on a GPU (float32 parameters, as this codebase keeps them) and float32 on
a CPU, with the attention implementation HF serves best there (`flash_attention_2` where
the flash-attn package is installed, else `sdpa`), AdamW fused on CUDA and foreach on a
CPU, the weight decay on matrices only and the learning rate of this codebase's schedule
at each step. ModernBERT predicts at the masked slots only (`sparse_prediction`, its own
training setting); BertForMaskedLM computes logits at every position, as it ships.
`compiled=True` wraps the model in torch.compile (the forward and, through AOTAutograd,
the backward; the fused optimizer is one kernel already).

transformers 4.x and 5.x both: the model comes from AutoConfig.for_model and
AutoModelForMaskedLM.from_config; 4.x's ModernBERT `reference_compile` (its own partial
compile) is turned off so that eager is eager.
"""
import dataclasses
import importlib.util
import os
import statistics
import time

import numpy as np

# The sides a step benchmark can add (--against): name -> torch.compile or not.
SIDES = {"torch": False, "torch_compiled": True}


def hf_config_dict(config) -> dict:
    """The HF config.json `encoder export` writes for config's model (its MLM class)."""
    from encoder.interop import families, hf
    cfg = config.model
    family = hf.choose_family(cfg, "mlm")
    info = {**hf.token_info(None), "kind": "mlm", "labels": None, "pooling": ""}
    return hf.hf_config(families.FAMILIES[family], cfg, "mlm", info)


def attention_implementation(device: str) -> str:
    """flash_attention_2 where the package is there (CUDA only), else PyTorch's SDPA."""
    if device == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def build_model(config, device: str, attn: str):
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM
    d = {k: v for k, v in hf_config_dict(config).items()
         if k not in ("architectures", "torch_dtype", "dtype")}
    hf_cfg = AutoConfig.for_model(d.pop("model_type"), **d)
    if hf_cfg.model_type == "modernbert":
        hf_cfg.sparse_prediction = True     # the masked slots only, as ModernBERT trained
        hf_cfg.reference_compile = False    # 4.x: no partial compile inside "eager"
    torch.manual_seed(int(config.seed))
    model = AutoModelForMaskedLM.from_config(hf_cfg, attn_implementation=attn)
    return model.to(device).train()


def parameter_count(model) -> int:
    """Distinct parameters (a tied decoder counted once, as this codebase counts it)."""
    return sum(p.numel() for p in model.parameters())


def decay_groups(model, weight_decay: float) -> list[dict]:
    """Weight decay on matrices (kernels, embedding tables), none on biases and norm gains:
    this codebase's decay_mask in PyTorch terms."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": rest, "weight_decay": 0.0}]


def learning_rates(config, steps: int) -> np.ndarray:
    """This codebase's learning rate at steps 0..steps-1 (read once, before timing)."""
    import jax
    import jax.numpy as jnp
    from encoder.train import optimizer
    schedule = optimizer.learning_rate_schedule(config.train)
    return np.asarray(jax.vmap(schedule)(jnp.arange(steps)), np.float64)


def make_optimizer(model, config, device: str):
    import torch
    t = config.train
    kind = {"fused": True} if device == "cuda" else {"foreach": True}
    opt = torch.optim.AdamW(decay_groups(model, float(t.weight_decay)),
                            lr=float(t.learning_rate), betas=(float(t.b1), float(t.b2)),
                            eps=float(t.eps), **kind)
    return opt, ("fused" if device == "cuda" else "foreach")


def mask_tokens(input_ids, attention_mask, generator, *, rate: float, mask_prob: float,
                random_prob: float, mask_id: int, first_random: int, vocab_size: int):
    """(corrupted ids, labels with -100 off the selected slots): HF's collator rule, on
    the device, every real token above the special ids a candidate."""
    import torch
    candidates = attention_mask.bool() & (input_ids >= first_random)
    draw = torch.rand(input_ids.shape, device=input_ids.device, generator=generator)
    selected = candidates & (draw < rate)
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
    action = torch.rand(input_ids.shape, device=input_ids.device, generator=generator)
    random_ids = torch.randint(first_random, vocab_size, input_ids.shape,
                               device=input_ids.device, generator=generator,
                               dtype=input_ids.dtype)
    ids = torch.where(selected & (action < mask_prob), torch.full_like(input_ids, mask_id),
                      input_ids)
    ids = torch.where(selected & (action >= mask_prob) & (action < mask_prob + random_prob),
                      random_ids, ids)
    return ids, labels


@dataclasses.dataclass
class TorchSide:
    """One PyTorch training setup, stepped by `step()` (which blocks until the step is
    done, so a host timer measures it); what the row reports is read after the steps."""
    name: str
    compiled: bool
    device: str
    attention: str
    optimizer: str
    model: object
    call: object
    opt: object
    inputs: dict
    lrs: np.ndarray
    masking: dict
    clip_norm: float
    generator: object
    autocast: object
    parameters: int
    loss: float = float("nan")
    steps_done: int = 0
    persistent_bytes: int = 0
    transient_peak: int = 0

    def step(self):
        import torch
        lr = float(self.lrs[min(self.steps_done, len(self.lrs) - 1)])
        for group in self.opt.param_groups:
            group["lr"] = lr
        ids, labels = mask_tokens(self.inputs["input_ids"], self.inputs["attention_mask"],
                                  self.generator, **self.masking)
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        with self.autocast():
            out = self.call(input_ids=ids, labels=labels, **self.model_inputs())
        out.loss.backward()
        if self.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm, foreach=True)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.loss = out.loss.detach()
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.transient_peak = max(self.transient_peak,
                                      torch.cuda.max_memory_allocated() - before)
        self.steps_done += 1

    def model_inputs(self) -> dict:
        return {k: v for k, v in self.inputs.items() if k not in ("input_ids",)}

    def final_loss(self) -> float:
        return float(self.loss)

    def peak_bytes(self) -> int | None:
        """This side's own peak on a GPU: its parameters, gradients and optimizer state
        plus the step's transient high-water mark (other sides' memory left out)."""
        if self.device != "cuda":
            return None
        return self.persistent_bytes + self.transient_peak


def torch_device() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def model_inputs(config, batch: dict, model_type: str, device: str) -> dict:
    """The HF forward's keyword inputs from this codebase's batch (ids included)."""
    import torch
    as_t = lambda x: torch.as_tensor(np.asarray(x), dtype=torch.long, device=device)  # noqa: E731
    out = {"input_ids": as_t(batch["input_ids"]), "attention_mask": as_t(batch["attention_mask"])}
    if model_type == "bert":
        out["token_type_ids"] = as_t(batch["segment_ids"])
    else:  # rotary positions restart at each packed document, as this codebase's batch has it
        out["position_ids"] = as_t(batch["positions"])
    return out


def build_side(config, batch: dict, compiled: bool, total_steps: int) -> TorchSide:
    """The model, optimizer and inputs of one side, not yet stepped."""
    import contextlib

    import torch
    device = torch_device()
    attn = attention_implementation(device)
    model = build_model(config, device, attn)
    opt, opt_kind = make_optimizer(model, config, device)
    call = torch.compile(model) if compiled else model
    m = config.masking
    masking = dict(rate=float(m.rate), mask_prob=float(m.mask_prob),
                   random_prob=float(m.random_prob), mask_id=4, first_random=5,
                   vocab_size=int(config.model.vocab_size))
    generator = torch.Generator(device=device)
    generator.manual_seed(int(config.seed))
    if device == "cuda":
        autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16)  # noqa: E731
    else:
        autocast = contextlib.nullcontext
    side = TorchSide(
        name="torch_compiled" if compiled else "torch", compiled=compiled, device=device,
        attention=attn, optimizer=opt_kind, model=model, call=call, opt=opt,
        inputs=model_inputs(config, batch, model.config.model_type, device),
        lrs=learning_rates(config, total_steps), masking=masking,
        clip_norm=float(config.train.clip_norm), generator=generator, autocast=autocast,
        parameters=parameter_count(model))
    return side


def settle_memory(side: TorchSide) -> None:
    """After the first step: parameters, gradients' buffers and AdamW's two moments."""
    state = sum(t.numel() * t.element_size() for s in side.opt.state.values()
                for t in s.values() if hasattr(t, "numel"))
    params = sum(p.numel() * p.element_size() for p in side.model.parameters())
    side.persistent_bytes = int(params + state)


def threads() -> dict:
    """The threads each side computes with on a CPU: torch's intra-op pool, and XLA's
    (one per core the process may run on)."""
    import torch
    return {"torch": torch.get_num_threads(), "xla": len(os.sched_getaffinity(0))}


def versions() -> dict:
    import torch
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__}


def own_flops(config) -> float:
    """FLOPs the HF step computes: the encoder, and the vocabulary projection at every
    position (BertForMaskedLM) or at the masked slots (ModernBERT's sparse prediction)."""
    from encoder.train import flops
    from benchmarks import hf_reference
    if hf_config_dict(config)["model_type"] == "modernbert":
        return flops.config_train_flops_per_step(config)
    return hf_reference.hf_train_flops(config)


def time_once(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def median(times) -> float:
    return statistics.median(times)
