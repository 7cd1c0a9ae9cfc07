"""Loading what a later job starts from: a pretraining workdir or a HuggingFace folder.

`load(init_from)` -> Pretrained(model_cfg, params, tokenizer, run_config):
  * a workdir of this codebase: its config.json, tokenizer and latest
    checkpoint's params (the whole pretraining model: encoder, heads; ELECTRA's
    generator too);
  * hf:DIR: a HuggingFace BERT-family folder (params {'encoder', 'pooler'?,
    'mlm_head'?}) with its WordPiece vocabulary.
"""
import dataclasses
import json
import os
from typing import Any

import ml_collections

from encoder.data import tokenizer as tokenizer_lib


@dataclasses.dataclass
class Pretrained:
    model_cfg: Any
    params: dict
    tokenizer: Any
    run_config: Any = None  # the pretraining run's config (workdirs only)


def load(init_from: str) -> Pretrained:
    if init_from.startswith("hf:"):
        from encoder.interop import hf_bert
        folder = init_from[3:]
        cfg, params = hf_bert.load(folder)
        return Pretrained(cfg, params, tokenizer_lib.load(folder))
    from encoder.train import checkpoint
    config_path = os.path.join(init_from, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"init_from={init_from!r}: expected a pretraining workdir with "
                                "config.json, or hf:DIR")
    with open(config_path) as f:
        run = ml_collections.ConfigDict(json.load(f))
    mngr = checkpoint.manager(init_from)
    step = mngr.latest_step()
    if step is None:
        raise FileNotFoundError(f"init_from={init_from!r}: no checkpoint in its workdir")
    restored = mngr.restore(step, args=checkpoint.ocp.args.Composite(
        state=checkpoint.ocp.args.StandardRestore()))
    mngr.close()
    tok_path = run.data.tokenizer or os.path.join(init_from, "tokenizer", "sp.model")
    if not run.data.tokenizer and not os.path.exists(tok_path):  # a WordPiece folder
        tok_path = os.path.join(init_from, "tokenizer")
    return Pretrained(run.model, restored["state"]["params"], tokenizer_lib.load(tok_path), run)
