"""A config file for `--config=encoder/json_config.py:PATH`: loads a resolved config JSON.

The ablation runner writes each run's resolved config and launches
`encoder.main` with it, so a run's config is exactly the file beside it.
"""
import json

import ml_collections


def get_config(path):
    with open(path) as f:
        return ml_collections.ConfigDict(json.load(f))
