"""`encoder prepare` as a user runs it: it writes only into a folder it owns, refuses
before writing anything, never calls a half-made or damaged corpus valid, and says so in
one line. Folders are hashed before and after every refusal."""
import json
import os

import pytest

from encoder.data import corpus, tokenizer as tokenizer_lib

from helpers import run_module, snapshot

pytestmark = pytest.mark.e2e


def prepare(*args, timeout=120):
    return run_module("encoder", "prepare", "--num_workers=1", *args, timeout=timeout)


def refused(rc, err, *words):
    assert rc == 1, err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("error: ") or err.lstrip().startswith(
        "error: "), err
    for w in words:
        assert w in err, (w, err)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    docs = corpus.stdlib_documents()[:600]
    (d / "in").mkdir()
    for k in range(2):
        (d / "in" / f"part{k}.txt").write_text("\n\n".join(docs[k::2]) + "\n")
    tok_a = tokenizer_lib.train_sentencepiece(docs, str(d / "a"), 300)
    tok_b = tokenizer_lib.train_sentencepiece(docs[::-1][:300], str(d / "b"), 280)
    return str(d / "in"), tok_a, tok_b


@pytest.fixture(scope="module")
def finished(text, tmp_path_factory):
    src, tok_a, _ = text
    out = str(tmp_path_factory.mktemp("prep") / "corpus")
    rc, stdout, err = prepare(f"--input={src}", f"--out={out}", f"--tokenizer={tok_a}",
                              "--shard_mb=0.05")
    assert rc == 0, err
    return out


def test_a_folder_it_did_not_write_is_refused_untouched(text, tmp_path):
    src, tok_a, _ = text
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    before = snapshot(mine)
    rc, _, err = prepare(f"--input={src}", f"--out={mine}", f"--tokenizer={tok_a}")
    refused(rc, err, "did not write", "thesis.tex")
    assert snapshot(mine) == before
    # --out inside the input (a rerun would read plan.json and the markers as text)
    rc, _, err = prepare(f"--input={src}", f"--out={src}/prepared", f"--tokenizer={tok_a}")
    refused(rc, err, "inside the input")
    assert not os.path.exists(f"{src}/prepared")


def test_another_tokenizer_is_refused_before_it_overwrites_the_corpus(text, finished):
    src, _, tok_b = text
    before = snapshot(finished)
    rc, _, err = prepare(f"--input={src}", f"--out={finished}", f"--tokenizer={tok_b}",
                         "--shard_mb=0.05")
    refused(rc, err, "tokenizer: ", "nothing was written")
    assert snapshot(finished) == before  # tokenizer/sp.model included
    rc, out, err = prepare(f"--out={finished}", "--verify")
    assert rc == 0 and "verified tokenizer" in out, err


def test_verify_checks_the_tokenizer_not_only_the_shards(text, finished, tmp_path):
    import shutil
    _, _, tok_b = text
    copy = str(tmp_path / "copy")
    shutil.copytree(finished, copy)
    shutil.copy(tok_b, os.path.join(copy, "tokenizer", "sp.model"))
    rc, _, err = prepare(f"--out={copy}", "--verify")
    refused(rc, err, "fingerprint", "sp.model")


def test_missing_and_damaged_shards_are_redone_with_or_without_the_manifest(text, finished,
                                                                            tmp_path):
    import shutil
    src, tok_a, _ = text
    copy = str(tmp_path / "copy")
    shutil.copytree(finished, copy)
    manifest = json.load(open(os.path.join(copy, "manifest.json")))
    shard = manifest["splits"]["train"]["shards"][0]["file"]
    os.remove(os.path.join(copy, shard))                       # missing, manifest present
    other = os.path.join(copy, manifest["splits"]["train"]["shards"][1]["file"])
    data = bytearray(open(other, "rb").read())
    data[len(data) // 2] ^= 0xFF                               # damaged, same size
    open(other, "wb").write(bytes(data))
    rc, _, err = prepare(f"--out={copy}", "--verify")
    refused(rc, err, "missing")
    args = [f"--input={src}", f"--out={copy}", f"--tokenizer={tok_a}", "--shard_mb=0.05"]
    rc, out, err = prepare(*args)
    assert rc == 0, err
    assert snapshot(copy)[shard] == snapshot(finished)[shard]
    assert snapshot(copy)[os.path.relpath(other, copy)] == snapshot(finished)[
        os.path.relpath(other, copy)]
    rc, out, err = prepare(f"--out={copy}", "--verify")
    assert rc == 0, err


def test_an_unfinished_corpus_is_never_read_as_text(text, finished, tmp_path):
    import shutil
    src, tok_a, _ = text
    half = str(tmp_path / "half")
    shutil.copytree(finished, half)
    os.remove(os.path.join(half, "manifest.json"))
    rc, _, err = prepare(f"--input={half}", f"--out={tmp_path / 'again'}", f"--tokenizer={tok_a}")
    refused(rc, err, "unfinished prepared corpus", "units done", "run the same prepare")
    rc, _, err = prepare(f"--out={half}", "--verify")
    refused(rc, err, "unfinished prepared corpus")
    # the corpus with a manifest, inside a list of text files: not read as text either
    rc, _, err = prepare(f"--input={src},{finished}", f"--out={tmp_path / 'mixed'}",
                         f"--tokenizer={tok_a}")
    refused(rc, err, "is a prepared corpus")
    assert not os.path.exists(tmp_path / "again") and not os.path.exists(tmp_path / "mixed")


def test_ranges_and_an_empty_training_split_are_errors_up_front(text, tmp_path):
    src, tok_a, _ = text
    out = tmp_path / "c"
    for flags, word in ((["--machine_index=2", "--num_machines=2"], "--machine_index=2"),
                        (["--valid_fraction=2"], "--valid_fraction=2"),
                        (["--shard_mb=0"], "--shard_mb=0")):
        rc, _, err = prepare(f"--input={src}", f"--out={out}", f"--tokenizer={tok_a}", *flags)
        refused(rc, err, word)
        assert not out.exists()
    one = tmp_path / "one_line.txt"
    one.write_text("x" * 5000 + "\n")
    rc, _, err = prepare(f"--input={one}", f"--out={out}", f"--tokenizer={tok_a}",
                         "--max_line_chars=1000")
    refused(rc, err, "one_line.txt: a line over max_line_chars=1000")
    assert not (out / "manifest.json").exists()
    rc, _, err = prepare(f"--input={one}", f"--out={tmp_path / 'c2'}", "--vocab_size=50",
                         "--max_line_chars=1000")  # no tokenizer given: it would be trained
    refused(rc, err, "no training document to train a tokenizer on", "a line over")
    utf16 = tmp_path / "u16.txt"
    utf16.write_text("hello world\n", encoding="utf-16")
    rc, _, err = prepare(f"--input={utf16}", f"--out={tmp_path / 'c16'}", "--vocab_size=50")
    refused(rc, err, "u16.txt (UTF-16 text")


def test_a_rerun_with_another_vocab_size_is_refused_with_a_diff(text, tmp_path):
    src, _, _ = text
    out = tmp_path / "trained"
    rc, _, err = prepare(f"--input={src}", f"--out={out}", "--vocab_size=200", "--shard_mb=0.2")
    assert rc == 0, err
    before = snapshot(out)
    rc, _, err = prepare(f"--input={src}", f"--out={out}", "--vocab_size=300", "--shard_mb=0.2")
    refused(rc, err, "'vocab_size': 200", "'vocab_size': 300")
    (tmp_path / "in2").mkdir()
    rc, _, err = prepare(f"--input={src}", f"--out={out}", "--vocab_size=200", "--shard_mb=0.2",
                         "--valid_fraction=0.2")
    refused(rc, err, "settings.valid_fraction: 0.05 -> 0.2")
    assert snapshot(out) == before
