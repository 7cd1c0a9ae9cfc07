"""Pretraining on a mixture, through the job (encoder/jobs/pretrain.py), in process: a run
stopped mid-mixture resumes bitwise; a phase that changes the mixture opens its own
stream, and the data order of its steps is on record."""
import os

import jax
import numpy as np
import pytest

from encoder import config as config_lib
from encoder.data import pipeline
from encoder.jobs import data_order, pretrain
from encoder.train import metrics_io

from helpers import phase_base_config

pytestmark = pytest.mark.e2e


def mixture_config(text_corpus, cache, **train):
    folder, tok = text_corpus
    c = phase_base_config(**train)
    c.data.update(dict(tokenizer=tok, cache_dir=cache))
    c.data.sources = dict(
        web=config_lib.mixture_source(os.path.join(folder, "part0.txt"), 0.7),
        code=config_lib.mixture_source(os.path.join(folder, "part1.txt"), 0.3),
        books=config_lib.mixture_source(os.path.join(folder, "part2.txt"), 0.0))
    return c


def losses(workdir):
    return [r["train/loss"] for r in metrics_io.read_metrics(workdir) if "train/loss" in r]


def test_a_run_stopped_mid_mixture_resumes_bitwise(text_corpus, tmp_path):
    cache = str(tmp_path / "cache")

    def config(nan_at=-1):
        c = mixture_config(text_corpus, cache, checkpoint_every=3, debug_nan_at_step=nan_at)
        c.train.num_steps = 7
        return c
    pretrain.train(config(), str(tmp_path / "ref"), devices=jax.devices()[:1])
    with pytest.raises(FloatingPointError):  # stopped at step 5, after step 3's checkpoint
        pretrain.train(config(nan_at=4), str(tmp_path / "cut"), devices=jax.devices()[:1])
    pretrain.train(config(), str(tmp_path / "cut"), devices=jax.devices()[:1])
    ref, cut = losses(str(tmp_path / "ref")), losses(str(tmp_path / "cut"))
    assert len(ref) == len(cut) == 7
    np.testing.assert_array_equal(cut, ref)


def test_a_phase_that_changes_the_mixture_reads_its_own_stream(text_corpus, tmp_path):
    c = mixture_config(text_corpus, str(tmp_path / "cache"))
    c.phases = (dict(name="stable", steps=4),
                dict(name="decay", steps=3, data=dict(sources=dict(books=dict(weight=1.0)),
                                                      temperature=0.5)))
    wd = str(tmp_path / "run")
    result = pretrain.train(c, wd, devices=jax.devices()[:1])
    assert result["step"] == 7
    rows = [r for r in metrics_io.read_metrics(wd) if "train/loss" in r]
    assert [r["phase"] for r in rows] == ["stable"] * 4 + ["decay"] * 3
    streams = pipeline.read_data_order(wd)["streams"]
    assert len(streams) == 2                                  # one per mixture
    drawn = set()
    for step in range(1, 8):
        header, step_rows = data_order.step_rows(wd, step, text_chars=0)
        assert header["phase"] == ("stable" if step <= 4 else "decay")
        drawn |= {(header["phase"], r["source"]) for r in step_rows}
    assert ("stable", "books") not in drawn and ("decay", "books") in drawn
    # the realised mixture in every row, carried across the change, and in the result
    t = [(r["data/web/tokens"], r["data/books/tokens"]) for r in rows]
    assert all(b == 0 for _, b in t[:4]) and t[-1][1] > 0
    assert all(w1 >= w0 for (w0, _), (w1, _) in zip(t, t[1:]))
    seq, batch = c.data.seq_len, c.train.batch_size
    assert sum(v for k, v in rows[-1].items() if k.endswith("/tokens")) == 7 * batch * seq
    assert result["data/books/tokens"] == t[-1][1]


def test_a_source_that_runs_dry_ends_its_phase_there(text_corpus, tmp_path):
    """data.on_exhausted='end': the phase ends at the step before the batch that would need
    a row past a source's last, with its final checkpoint; a restart does nothing more."""
    c = mixture_config(text_corpus, str(tmp_path / "cache"), checkpoint_every=100)
    small = tmp_path / "small.txt"
    small.write_text("\n\n".join(f"A short document number {i} about a small source."
                                   for i in range(300)) + "\n")
    c.data.sources = dict(
        web=config_lib.mixture_source(os.path.join(text_corpus[0], "part0.txt"), 0.5),
        small=config_lib.mixture_source(str(small), 0.5))
    c.data.on_exhausted = "end"
    c.train.num_steps = 40
    wd = str(tmp_path / "run")
    result = pretrain.train(c, wd, devices=jax.devices()[:1])
    assert 0 < result["step"] < 40
    rows = [r for r in metrics_io.read_metrics(wd) if "train/loss" in r]
    assert rows[-1]["step"] == result["step"] and rows[-1]["data/small/epochs"] <= 1.0
    from encoder.checkpoints import store
    mngr = store.manager(wd, create=False)
    assert mngr.latest_step() == result["step"]
    mngr.close()
    again = pretrain.train(c, wd, devices=jax.devices()[:1])
    assert again["step"] == result["step"]
