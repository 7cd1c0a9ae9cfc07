"""An OSError's one line names the path the user typed (not an atomic write's temporary
name) and, when a folder on the way is missing, that folder."""
import pytest

from encoder import errors


@pytest.mark.parametrize("name", ["x.jsonl.tmp4242", "x.jsonl.tmp4242.npz", "x.jsonl"])
def test_a_write_into_a_missing_folder_names_the_folder_and_the_users_path(tmp_path, name):
    with pytest.raises(FileNotFoundError) as e:
        open(tmp_path / "nodir" / name, "w")
    line = errors.message(e.value)
    assert f"{tmp_path / 'nodir' / 'x.jsonl'} (its folder {tmp_path / 'nodir'} does not " \
           "exist" in line
    assert ".tmp" not in line


def test_a_missing_file_in_an_existing_folder_is_named_alone(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        open(tmp_path / "absent.json")
    assert errors.message(e.value) == f"No such file or directory: {tmp_path / 'absent.json'}"
