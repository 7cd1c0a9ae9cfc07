"""evaluate given a held-out file with no document names that file (it once said "give
--config.data.valid_files" to a user who had given one)."""
import pytest

from encoder.finetune import config as finetune_config
from encoder.jobs import evaluate


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_an_empty_valid_file_is_named(tmp_path, tiny_pretrained, content):
    empty = tmp_path / "valid.txt"
    empty.write_text(content)
    config = finetune_config.get_config("runlocal", job="evaluate")
    config.init_from = tiny_pretrained
    config.data.valid_files = str(empty)
    with pytest.raises(ValueError) as e:
        evaluate.evaluate(config, str(tmp_path / "out"))
    assert str(empty) in str(e.value) and "give --config" not in str(e.value), str(e.value)
