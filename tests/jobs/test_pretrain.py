"""The pretraining job in process: FSDP shards parameters and optimizer state, the run says
how often it reads its data (whole runs, signals and resumes: tests/e2e/test_pretrain_runs.py)."""
from encoder.jobs import pretrain
from helpers import tiny_pretrain_config


def small_config(**train):
    return tiny_pretrain_config(**{"num_steps": 10, "log_every": 1, "checkpoint_every": 100,
                                   **train})


def test_fsdp_shards_parameters(shared_data, tmp_path):
    config = small_config()
    config.data.tokenizer, config.data.cache_dir = shared_data
    config.mesh.update(dict(data=4, fsdp=2))
    state = pretrain.build(config, str(tmp_path)).trainer.initial_state
    kernel = state.params["encoder"]["blocks_0"]["mlp"]["wi"]["kernel"]  # [embed, mlp]
    assert kernel.sharding.spec[0] == "fsdp"
    assert kernel.addressable_shards[0].data.shape == (kernel.shape[0] // 2, kernel.shape[1])
    mu = state.opt_state[1][0].mu["encoder"]["blocks_0"]["mlp"]["wi"]["kernel"]
    assert mu.sharding.spec[0] == "fsdp"


def test_the_run_says_how_many_times_it_reads_its_data():
    from encoder.jobs import pretrain
    once = pretrain.data_passes(rows=400, steps=50, batch_size=8, seq_len=128)
    assert "read it 1.0 times" in once and "many passes" not in once
    many = pretrain.data_passes(rows=3398, steps=1200, batch_size=32, seq_len=128)
    assert "read it 11.3 times" in many and "many passes" in many
