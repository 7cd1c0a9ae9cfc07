"""encoder.ablate refuses what would drop or collide runs (issue 36): a second --sweep on
one field (the first's values never ran), and a second command on one study folder (each
reported the other's runs as FAILED)."""
import os

import pytest

from encoder import errors
from encoder.studies import ablation
from encoder.train import workdir as workdir_lib


def _base():
    from experiments import pretrain as pretrain_exp
    return pretrain_exp.get_config("runlocal")


def test_a_second_sweep_on_one_field_is_refused_naming_it():
    sweeps = [ablation.parse_sweep("model.position=rope"),
              ablation.parse_sweep("model.position=learned")]
    with pytest.raises(errors.UsageError, match=r"model\.position=\.\.\. is given twice.*"
                                                r"--sweep=model\.position=rope,learned"):
        ablation.check_sweeps(sweeps, _base())
    # what used to happen: the product of the two had only `learned`
    assert [v["model.position"] for v in ablation.expand(sweeps, False)] == ["learned"]


def test_an_option_and_the_field_it_sets_are_one_field():
    base = _base()
    with pytest.raises(errors.UsageError, match=r"position=\.\.\. and --sweep=model\.position"
                                                r"=\.\.\. both set model\.position"):
        ablation.check_sweeps([ablation.parse_sweep("position=rope,alibi"),
                               ablation.parse_sweep("model.position=learned")], base)
    with pytest.raises(errors.UsageError, match="model.num_layers"):  # size sets the shape
        ablation.check_sweeps([ablation.parse_sweep("size=tiny,small"),
                               ablation.parse_sweep("model.num_layers=2,4")], base)
    # different fields combine as before
    ablation.check_sweeps([ablation.parse_sweep("model.position=rope,learned"),
                           ablation.parse_sweep("objective=mlm,rtd")], base)


def test_a_repeated_sweep_is_refused_before_the_folder_is_written(tmp_path):
    root = tmp_path / "study"
    study = ablation.Study(workdir=str(root), config=_base(),
                           sweeps=("model.position=rope", "model.position=learned"))
    with pytest.raises(errors.UsageError, match="given twice"):
        ablation.run_study(study, launcher=None)
    assert not root.exists()


def test_a_study_folder_in_use_is_refused_and_left_as_it_was(tmp_path):
    root = tmp_path / "study"
    study = ablation.Study(workdir=str(root), config=_base(), sweeps=("objective=mlm",))
    with workdir_lib.Lock(str(root)):  # another ablate command, alive, on this folder
        with pytest.raises(workdir_lib.WorkdirBusy, match=f"in use by pid {os.getpid()}"):
            ablation.run_study(study, launcher=None)
        assert sorted(os.listdir(root)) == ["LOCK"]  # no marker, no runs/ of the second
    assert os.listdir(root) == []  # released: the next command takes it
