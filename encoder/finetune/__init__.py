"""Fine-tuning's parts: what the fine-tuning job (encoder/jobs/finetune.py) adds to the
shared trainer (encoder/train/trainer.py). The task types live in encoder/tasks/.

lora.py            low-rank adapters (Hu et al. 2021), merged inside the step
layer_decay.py     ELECTRA's layer-wise learning-rate decay
frozen.py          which parameters train in each mode (full | frozen probe | lora)
defaults.py        hyperparameters that fit the model's size
config.py          the fine-tuning / evaluate / embed schema (plain data)
"""
