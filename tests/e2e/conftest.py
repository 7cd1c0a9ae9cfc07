"""End-to-end fixtures: a real one-node SLURM cluster (session-scoped), the shared tiny data."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slurm_cluster  # noqa: E402
from helpers import child_env  # noqa: E402


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """munged, slurmctld and slurmd started for this session (as root), stopped by pid after;
    yields the environment a client needs (SLURM_CONF). Skips where SLURM is absent."""
    why = slurm_cluster.missing()
    if why:
        pytest.skip(f"no SLURM cluster here: {why}")
    cluster = slurm_cluster.Cluster(str(tmp_path_factory.mktemp("slurm"))).start()
    try:
        yield child_env(**cluster.env)
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def tiny_data(tiny_pretrained):
    """config overrides that reuse the session's tokenizer and prepared corpus (speed)."""
    return {"data.tokenizer": os.path.join(tiny_pretrained, "tokenizer", "sp.model"),
            "data.cache_dir": os.path.join(tiny_pretrained, "cache")}
