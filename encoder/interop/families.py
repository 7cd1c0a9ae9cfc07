"""Every HuggingFace family this codebase imports and exports: one table.

A family's module builds its `Family` (encoder/interop/family.py); adding a
family is one module and one line here. The order is the order in which
`hf.choose_family` tries them for a model that names none.
"""
from encoder.interop import bert, deberta, modernbert

FAMILIES = {f.name: f for f in (bert.BERT, bert.ROBERTA, bert.ALBERT, bert.ELECTRA,
                                bert.ROFORMER, modernbert.FAMILY, deberta.FAMILY)}
BY_MODEL_TYPE = {f.model_type: f for f in FAMILIES.values()}
