"""Mixtures of sources (encoder/data/mixture.py): weights and temperatures by hand, the
realised proportions, exact resume, sharding over processes, epochs, a dry source, a
phase that changes the mixture, and bad specs refused in one line."""
import json

import numpy as np
import pytest

from encoder import config as config_lib
from encoder.data import mixture, pipeline
from encoder.train import phases

T = 4  # tokens a row: each row holds its source and its index, so a batch says what it read


def rows_of(source: int, n: int) -> pipeline.Rows:
    """n rows whose input_ids are [source, r, r, r]: every row names where it came from."""
    ids = np.stack([np.full(T, r, np.int32) for r in range(n)])
    ids[:, 0] = source
    return pipeline.Rows({"input_ids": ids, "attention_mask": np.ones((n, T), np.int32)})


def make(weights, sizes=(50, 30, 20), on_exhausted="repeat", names=("web", "code", "books")):
    k = len(weights)
    rows = tuple(rows_of(s, n) for s, n in enumerate(sizes[:k]))
    probs = mixture.probabilities(weights, [0] * k, 0.0)
    return mixture.Mixture(names[:k], rows, probs, on_exhausted, seq_len=T)


def read(it, steps: int) -> list[np.ndarray]:
    return [next(it)["input_ids"] for _ in range(steps)]


# ----------------------------------------------------------------------------- weights

def test_temperature_weights_as_computed_by_hand():
    # tau = 0: the weights as given, normalised
    np.testing.assert_allclose(mixture.probabilities([1, 3], [10, 10], 0.0), [0.25, 0.75])
    # tau = 1: in proportion to size
    np.testing.assert_allclose(mixture.probabilities([1, 1], [900, 100], 1.0), [0.9, 0.1])
    # tau = 0.5: sqrt(900) = 30, sqrt(100) = 10 -> 30/40, 10/40
    np.testing.assert_allclose(mixture.probabilities([1, 1], [900, 100], 0.5), [0.75, 0.25])
    # weights multiply: 2 * 1000**0.3 = 2 * 10**0.9 = 15.8866, 10**0.3 = 1.99526
    np.testing.assert_allclose(mixture.probabilities([2, 1], [1000, 10], 0.3),
                               [15.886565 / 17.881827, 1.995262 / 17.881827], rtol=1e-6)


def test_a_falling_temperature_moves_the_mixture_towards_uniform():
    """mmBERT's schedule, tau 0.7 -> 0.5 -> 0.3: the small source's share grows."""
    sizes = [1e12, 1e10, 1e8]
    small = [mixture.probabilities([1, 1, 1], sizes, tau)[2] for tau in (0.7, 0.5, 0.3)]
    assert small[0] < small[1] < small[2] < 1 / 3
    # 1e8**0.3 / (1e12**0.3 + 1e10**0.3 + 1e8**0.3) = 10**2.4 / (10**3.6 + 10**3 + 10**2.4)
    assert small[2] == pytest.approx(10**2.4 / (10**3.6 + 10**3 + 10**2.4))


# ----------------------------------------------------------------------------- sampling

def test_realised_proportions_are_within_tolerance_of_the_weights():
    weights = np.array([0.6, 0.3, 0.1])
    it = make(weights, sizes=(400, 400, 400)).iterator(32, seed=3)
    batches = read(it, 400)                                   # 12,800 rows
    seen = np.bincount(np.concatenate([b[:, 0] for b in batches]), minlength=3)
    n = seen.sum()
    tolerance = 4 * np.sqrt(weights * (1 - weights) / n)      # 4 binomial standard errors
    assert np.all(np.abs(seen / n - weights) < tolerance), (seen / n, weights)
    assert it.get_state()["drawn"] == {"web": seen[0], "code": seen[1], "books": seen[2]}


def test_each_epoch_of_a_source_is_a_new_permutation_and_epochs_are_counted():
    m = make([1.0], sizes=(37,))
    it = m.iterator(37, seed=0)
    epochs = [b[:, 1] for b in read(it, 3)]
    for e in epochs:
        assert sorted(e.tolist()) == list(range(37))          # every row once per epoch
    assert epochs[0].tolist() != epochs[1].tolist() != epochs[2].tolist()
    assert it.realised()["web"] == {"rows": 111, "tokens": 111 * T, "epochs": 3.0}
    assert it.metrics() == {"data/web/tokens": 111 * T, "data/web/epochs": 3.0}


def test_the_source_of_a_row_is_a_pure_function_of_seed_and_row():
    cdf = mixture.cumulative([0.5, 0.5])
    whole = mixture.sources_of(7, cdf, 0, 1000)
    parts = np.concatenate([mixture.sources_of(7, cdf, a, 100) for a in range(0, 1000, 100)])
    np.testing.assert_array_equal(whole, parts)
    assert not np.array_equal(whole, mixture.sources_of(8, cdf, 0, 1000))
    # the same draws under other weights: a weight ablation changes only what it must
    other = mixture.sources_of(7, mixture.cumulative([0.6, 0.4]), 0, 1000)
    assert np.all(other[whole == 0] == 0)


def test_a_permutation_is_a_bijection_at_every_size():
    for n in (1, 2, 3, 7, 64, 100, 1001):
        out = mixture.permute(mixture.stream_key("k", n), np.arange(n), n)
        assert sorted(out.tolist()) == list(range(n))


def test_resume_mid_mixture_reads_bitwise_what_an_uninterrupted_run_reads():
    m = make([0.5, 0.3, 0.2])
    uninterrupted = m.iterator(8, seed=11)
    whole = read(uninterrupted, 30)                           # several epochs of each source
    it = m.iterator(8, seed=11)
    read(it, 13)
    state = json.loads(json.dumps(it.get_state()))            # as the checkpoint keeps it
    resumed = m.iterator(8, seed=11)
    resumed.set_state(state)
    for a, b in zip(whole[13:], read(resumed, 17)):
        np.testing.assert_array_equal(a, b)
    assert resumed.get_state() == uninterrupted.get_state()
    assert max(f["epochs"] for f in resumed.realised().values()) > 2


def test_processes_read_disjoint_blocks_of_the_same_global_batch():
    m = make([0.5, 0.3, 0.2])
    single = read(m.iterator(12, seed=5), 6)
    parts = [read(m.iterator(12, seed=5, process_index=p, process_count=3), 6)
             for p in range(3)]
    for step in range(6):
        np.testing.assert_array_equal(np.concatenate([p[step] for p in parts]), single[step])
    with pytest.raises(ValueError, match="not divisible by 5 processes"):
        m.iterator(12, seed=5, process_count=5)


def test_a_saved_position_of_another_mixture_is_refused():
    it = make([0.5, 0.5]).iterator(4, seed=0)
    read(it, 2)
    other = make([0.7, 0.3]).iterator(4, seed=0)
    with pytest.raises(ValueError, match="belongs to another mixture"):
        other.set_state(it.get_state())
    with pytest.raises(ValueError, match="a single source's"):
        other.set_state({"next_index": 3})                    # a grain iterator's state


def test_on_exhausted_end_stops_at_the_first_batch_a_dry_source_cannot_fill():
    m = make([0.5, 0.5], sizes=(40, 400), on_exhausted="end")
    expected = mixture.batches_until_exhausted(2, m.probs, m.sizes, 8, 1000)
    assert expected is not None and 5 <= expected < 20      # ~40 / (0.5 * 8) = 10
    it = m.iterator(8, seed=2)
    got = read(it, expected)
    with pytest.raises(mixture.SourceExhausted, match="data.sources.web ran dry"):
        next(it)
    assert len(got) == expected and it.get_state()["drawn"]["web"] <= 40
    seen = np.concatenate([b for b in got])
    web = seen[seen[:, 0] == 0, 1]
    assert len(set(web.tolist())) == len(web)                 # never a row twice: one epoch


def test_a_source_of_weight_zero_is_never_drawn():
    m = mixture.Mixture(("a", "b", "c"), (rows_of(0, 5), None, rows_of(2, 5)),
                        np.array([0.5, 0.0, 0.5]), seq_len=T)
    seen = np.concatenate([b[:, 0] for b in read(m.iterator(10, seed=1), 20)])
    assert 1 not in seen and len(m) == 10
    with pytest.raises(ValueError, match="data.sources.b: no training row"):
        mixture.Mixture(("a", "b"), (rows_of(0, 5), None), np.array([0.5, 0.5]))


def test_realised_figures_carry_across_streams():
    first = make([1.0], sizes=(10,)).iterator(5, seed=0)
    read(first, 4)                                            # 20 rows: 2 epochs
    second = make([1.0], sizes=(40,)).iterator(5, seed=1000)
    second.carry(first)
    read(second, 2)                                           # 10 rows: a quarter epoch
    assert second.realised()["web"] == {"rows": 30, "tokens": 30 * T, "epochs": 2.25}
    again = make([1.0], sizes=(40,)).iterator(5, seed=1000)
    again.set_state(json.loads(json.dumps(second.get_state())))
    assert again.realised() == second.realised()
    restarted = make([1.0], sizes=(40,)).iterator(5, seed=1000)  # from the saved state
    restarted.carry(json.loads(json.dumps(first.get_state())))
    assert restarted.realised()["web"]["epochs"] == 2.0


# ----------------------------------------------------------------------------- held-out

def test_held_out_rows_interleave_the_sources_by_their_shares():
    held = mixture.Interleaved(("web", "code"), (rows_of(0, 500), rows_of(1, 30)), [0.8, 0.2])
    first = held.read_batch(np.arange(mixture.HELD_OUT_SLOTS))["input_ids"]
    shares = np.bincount(first[:, 0], minlength=2) / len(first)
    np.testing.assert_allclose(shares, [0.8, 0.2], atol=1 / mixture.HELD_OUT_SLOTS)
    assert np.abs(np.diff(np.flatnonzero(first[:, 0] == 1))).max() <= 6  # spread, not a run
    assert len(held) == 530 and first[first[:, 0] == 1, 1].max() < 30  # code's rows wrap


# ----------------------------------------------------------------------------- the spec

def data_cfg(**over):
    c = config_lib.base_config().data
    c.sources = dict(web=dict(files="web/", weight=0.7), code=dict(files="code/", weight=0.3))
    c.update(over)
    return c


def test_a_spec_is_parsed_with_its_defaults():
    spec = mixture.parse(data_cfg(temperature=0.5))
    assert spec.names == ("code", "web") and spec.temperature == 0.5
    assert spec.sources[1] == mixture.Source("web", "web/", "", "", 0.7)
    assert mixture.parse(config_lib.base_config().data) is None  # no sources: train_files


@pytest.mark.parametrize("change,message", [
    (dict(sources=dict(web=dict(weight=-1.0))), "data.sources.web.weight=-1.0: expected a "
                                                "number >= 0"),
    (dict(sources=dict(web=dict(wieght=1.0))), "data.sources.web.wieght: unknown; a source "
                                               "has files, format, text_field, weight"),
    (dict(sources={"9web": dict(weight=1.0)}), "'9web' is not a source name"),
    (dict(sources=dict(web=dict(weight=0.0), code=dict(weight=0.0))), "every weight is 0"),
    (dict(sources=dict(web=dict(files=3))), "data.sources.web.files=3: expected a string"),
    (dict(sources=dict(web=dict(format="parket"))), "data.sources.web.format='parket': "
                                                    "expected one of text, jsonl, parquet"),
    (dict(temperature=1.5), "data.temperature=1.5: expected a number in [0, 1]"),
    (dict(on_exhausted="loop"), "data.on_exhausted='loop': expected one of repeat, end"),
    (dict(train_files="corpus.txt"), "give data.train_files or data.sources, not both"),
])
def test_bad_specs_are_refused_in_one_line(change, message):
    c = config_lib.base_config().data
    c.update(dict(sources=dict(web=dict(files="w", weight=1.0)), **{
        k: v for k, v in change.items() if k != "sources"}))
    if "sources" in change:
        c.sources = change["sources"]
    with pytest.raises(ValueError) as e:
        mixture.parse(c, "phase 'decay'")
    text = str(e.value)
    assert "\n" not in text and text.startswith("phase 'decay': ") and message in text


def test_a_temperature_without_sources_is_refused():
    c = config_lib.base_config().data
    c.temperature = 0.5
    with pytest.raises(ValueError, match="data.sources is empty"):
        mixture.parse(c)


# ----------------------------------------------------------------------------- phases

def phased(*data_changes):
    c = config_lib.base_config()
    c.data.sources = dict(web=dict(files="web/", weight=0.9), code=dict(files="code/",
                                                                         weight=0.1))
    c.phases = tuple(dict(name=f"p{i}", steps=3, **({"data": d} if d is not None else {}))
                     for i, d in enumerate(data_changes))
    return c


def test_a_phase_that_changes_the_mixture_starts_a_new_stream():
    plan = phases.plan(phased(None, dict(temperature=0.5), dict(temperature=0.5),
                              dict(sources=dict(code=dict(weight=0.5),
                                                books=dict(files="books/", weight=0.2)))))
    assert [p.stream for p in plan.phases] == [0, 1, 1, 3]
    last = mixture.parse(plan.phases[3].config.data)
    assert {s.name: s.weight for s in last.sources} == {"books": 0.2, "code": 0.5, "web": 0.9}
    assert dict(zip(last.names, (s.files for s in last.sources)))["code"] == "code/"  # kept
    assert plan.phases[3].config.data.temperature == 0.0      # each phase reads as stated
    assert phases.stream_seed(0, plan.phases[3]) == 3000


def test_a_bad_mixture_in_a_phase_is_refused_naming_the_phase_and_the_source():
    with pytest.raises(ValueError, match=r"^phase 'p1': data.sources.code.weight=-0.5"):
        phases.plan(phased(None, dict(sources=dict(code=dict(weight=-0.5)))))
    with pytest.raises(ValueError, match=r"^phase 'p1': data.sources.books must be a dict"):
        phases.plan(phased(None, dict(sources=dict(books=0.3))))
    with pytest.raises(ValueError, match=r"^phase 'p0': data.temperature=2"):
        phases.plan(phased(dict(temperature=2.0)))


def test_the_recipes_declare_their_mixtures_and_schedules():
    from experiments import mmbert_base, modernbert_base
    mm = phases.plan(mmbert_base.get_config())
    assert [p.config.data.temperature for p in mm.phases] == [0.7, 0.5, 0.3]
    drawn = [sorted(s.name for s in mixture.parse(p.config.data).sources if s.weight > 0)
             for p in mm.phases]
    assert len(drawn[0]) < len(drawn[1]) < len(drawn[2])      # languages added by phase
    mb = phases.plan(modernbert_base.get_config())
    spec = [mixture.parse(p.config.data) for p in mb.phases]
    assert spec[0] == spec[1] != spec[2]                      # the decay changes the mixture
    weights = [{s.name: s.weight for s in sp.sources} for sp in spec]
    assert weights[0] == {"web": 1.0, "code": 1.0, "science": 1.0, "quality": 0.0}
    assert weights[2] == {**weights[0], "quality": 2.0} and spec[0].temperature == 1.0
    # sized by their tokens: 1 : 1 : 1 : 2 over sizes 6, 2, 1, 1 -> 6/11, 2/11, 1/11, 2/11
    np.testing.assert_allclose(mixture.probabilities(
        [weights[2][n] for n in ("web", "code", "science", "quality")], [6, 2, 1, 1], 1.0),
        [6 / 11, 2 / 11, 1 / 11, 2 / 11])


# ----------------------------------------------------------------------------- ablations

def test_an_ablation_sweeps_a_sources_weight_and_the_temperature():
    from encoder.studies import ablation
    from experiments import modernbert_base
    base = modernbert_base.get_config("runlocal")
    variants = ablation.expand([ablation.parse_sweep("data.sources.code.weight=0.5,2"),
                                ablation.parse_sweep("data.temperature=0.3,0.7")], False)
    configs = [ablation.apply_variant(base, v) for v in variants]
    assert [(c.data.sources.code.weight, c.data.temperature) for c in configs] == [
        (0.5, 0.3), (0.5, 0.7), (2.0, 0.3), (2.0, 0.7)]
    assert [c.data.sources.web.weight for c in configs] == [1.0] * 4   # the others stay
    assert ablation.variant_name(variants[0]) == "code.weight=0.5,temperature=0.3"
    with pytest.raises(ValueError, match="no 'nope' in the config"):
        ablation.apply_variant(base, {"data.sources.nope.weight": 1.0})


def test_a_run_row_names_the_mixture_it_realised():
    from encoder.studies import ablation
    rows = [{"step": 5, "data/web/tokens": 300, "data/code/tokens": 100},
            {"step": 10, "data/web/tokens": 700, "data/code/tokens": 300, "train/loss": 1.0}]
    shares = ablation.realised_mixture(rows)
    assert shares == {"mixture/web": 0.7, "mixture/code": 0.3}
    assert ablation.mixture_text(shares) == "web 70%, code 30%"
    assert ablation.realised_mixture([{"step": 1, "train/loss": 2.0}]) == {}
