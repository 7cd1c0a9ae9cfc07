"""Fine-tuning: a pretrained (or imported) encoder plus one task type's head, trained
through the same sharded, resumable trainer as pretraining (encoder/train/trainer.py).

task.py            the Task interface: examples -> arrays -> head -> loss -> scores
classification.py  regression.py  tagging.py  qa.py  contrastive.py   one file per type
tasks.py           the table of task types (name -> Task class)
lora.py            low-rank adapters (Hu et al. 2021), merged inside the step
layer_decay.py     ELECTRA's layer-wise learning-rate decay
frozen.py          which parameters train in each mode (full | frozen probe | lora)
defaults.py        hyperparameters that fit the model's size
config.py          the fine-tuning / evaluate / embed schema (plain data)
run.py             the job: load, build, train, keep the best epoch, write results
"""
