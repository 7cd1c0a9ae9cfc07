"""The checkpoint layer: the one door every job saves through and starts from.

store.py    orbax checkpoints of a run (train state + data iterator + meta), with
            fallback to the newest step that restores; params-only folders.
sources.py  "what can I start from": any workdir of this codebase (pretraining or
            fine-tuning), a params folder, or hf:DIR -> Pretrained(model_cfg, params,
            tokenizer, ...); and the merge of loaded subtrees into a fresh model.

store.py sits below every other layer except config; sources.py sits above the
HuggingFace readers (encoder/interop) and below train/, finetune/ and eval/.
"""
