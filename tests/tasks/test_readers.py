"""Task files: readers with file:line errors, GLUE TSV layouts, featurizers (QA windows, tags).

Readers by type name are encoder/tasks/readers.py; each featurizer is its type's file's."""

import pytest

from encoder.data import corpus, tokenizer as tokenizer_lib
from encoder.tasks import classification, qa, tagging
from encoder.tasks import readers as tasks
from helpers import minilm_dir


@pytest.fixture(scope="module")
def sp_tok(tmp_path_factory):
    docs = corpus.stdlib_documents()[:1500]
    path = tokenizer_lib.train_sentencepiece(docs, str(tmp_path_factory.mktemp("tok") / "sp"), 2000)
    return tokenizer_lib.load(path)


@pytest.mark.parametrize("which", ["sp", "wordpiece"])
def test_qa_windows_map_the_gold_answer_back_exactly(sp_tok, which):
    tok = sp_tok if which == "sp" else tokenizer_lib.load(minilm_dir())
    filler = " ".join(f"Sentence number {i} says nothing useful about files." for i in range(40))
    answer = "open_file_descriptor"
    context = filler + f" The function you want is {answer} which opens it. " + filler
    start = context.index(answer)
    ex = {"question": "Which function opens it?", "context": context, "answer_text": answer,
          "answer_start": start, "_where": "x"}
    arrays, meta = qa.featurize_qa([ex], tok, max_len=64, stride=24)
    assert len(meta) > 5  # the context really was split
    hits = [w for w in range(len(meta)) if arrays["start_positions"][w] > 0]
    assert hits
    for w in hits:
        s, e = arrays["start_positions"][w], arrays["end_positions"][w]
        assert s <= e and arrays["context_mask"][w, s] and arrays["context_mask"][w, e]
        assert qa.qa_answer_text(ex, meta[w], int(s), int(e)) == answer
    # Windows overlap and together cover every context token.
    n_ctx = len(tok.encode_with_offsets(context)[0])
    covered = set()
    for info in meta:
        covered |= set(range(info["lo"], info["lo"] + len(info["offsets"])))
    assert covered == set(range(n_ctx))


def test_a_long_question_leaves_short_rows_half_for_the_context(sp_tok):
    """A question longer than the row (the embedded api_qa's longest at runlocal's 64 tokens)
    is cut to half the row, as BERT's SQuAD recipe caps questions, instead of refusing."""
    question = " ".join(["which function returns the value of the named attribute"] * 12)
    context = "getattr: Return the value of the named attribute of object."
    ex = {"question": question, "context": context, "answer_text": "getattr",
          "answer_start": 0, "_where": "x"}
    arrays, meta = qa.featurize_qa([ex], sp_tok, max_len=64, stride=24)
    assert len(sp_tok.encode(question)) > 64
    assert all(len(m["offsets"]) > 0 for m in meta)
    assert (arrays["input_ids"][:, 32 + 2] != sp_tok.pad_id).all()  # context after 32 + 2
    s0, e0 = int(arrays["start_positions"][0]), int(arrays["end_positions"][0])
    assert s0 >= 34 and qa.qa_answer_text(ex, meta[0], s0, e0) == "getattr"  # after 1+32+1


def test_malformed_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "ok", "label": "a"}\n\n{"text": "broken", \n')
    with pytest.raises(tasks.TaskDataError, match=r"train.jsonl:3: not valid JSON"):
        tasks.read_jsonl(str(path), "classification")
    path.write_text('{"text": "ok", "label": "a"}\n{"txt": "typo", "label": "b"}\n')
    with pytest.raises(tasks.TaskDataError, match=r"train.jsonl:2: missing field"):
        tasks.read_jsonl(str(path), "classification")
    path.write_text('{"tokens": ["a", "b"], "tags": ["O"]}\n')
    with pytest.raises(tasks.TaskDataError, match=r":1: 2 tokens but 1 tags"):
        tasks.read_jsonl(str(path), "tagging")
    path.write_text('{"question": "q", "context": "abc", "answer_text": "x", "answer_start": 0}\n')
    with pytest.raises(tasks.TaskDataError, match="answer_text is not at answer_start"):
        tasks.read_jsonl(str(path), "qa")


def test_unseen_label_is_an_error_at_dev_time(tmp_path, sp_tok):
    train = [{"text": "a", "label": "x", "_where": "t:1"}, {"text": "b", "label": "y",
                                                            "_where": "t:2"}]
    labels = tasks.LabelSet.from_examples(train, "classification")
    dev = [{"text": "c", "label": "z", "_where": "dev.jsonl:7"}]
    with pytest.raises(tasks.TaskDataError, match=r"dev.jsonl:7: label 'z' was not seen"):
        classification.featurize_sequences(dev, sp_tok, 16, labels)


def test_glue_tsv_readers(tmp_path):
    (tmp_path / "sst.tsv").write_text("sentence\tlabel\nit is great\t1\nawful\t0\n")
    (tmp_path / "mrpc.tsv").write_text(
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA cat.\tA feline.\n")
    (tmp_path / "cola.tsv").write_text("gj04\t1\t\tThe book was read.\n")
    (tmp_path / "bad.tsv").write_text("sentence\tlabel\nonly one column\n")
    assert tasks.read_glue_tsv(str(tmp_path / "sst.tsv"))[0]["text"] == "it is great"
    pair = tasks.read_glue_tsv(str(tmp_path / "mrpc.tsv"))[0]
    assert (pair["text_a"], pair["text_b"], pair["label"]) == ("A cat.", "A feline.", "1")
    cola = tasks.read_glue_tsv(str(tmp_path / "cola.tsv"))[0]
    assert (cola["text"], cola["label"]) == ("The book was read.", "1")
    with pytest.raises(tasks.TaskDataError, match=r"bad.tsv:2: 1 columns"):
        tasks.read_glue_tsv(str(tmp_path / "bad.tsv"))


def test_tagging_labels_sit_on_first_pieces(sp_tok):
    ex = [{"tokens": ["Internationalization", "of", "os.path"], "tags": ["B-X", "O", "B-Y"],
           "_where": "x"}]
    labels = tasks.LabelSet.from_examples(ex, "tagging")
    arrays, word_pos = tagging.featurize_tagging(ex, sp_tok, 32, labels)
    tags = arrays["labels"][0]
    assert [tags[p] for p in word_pos[0]] == [labels.names.index(t) for t in ex[0]["tags"]]
    assert (tags != tasks.IGNORE).sum() == 3


def test_tagging_truncation_keeps_a_prefix_of_the_words(sp_tok):
    """A word that does not fit ends the row: a shorter word after it is not packed in
    (that would put it next to a word it never followed)."""
    long_word = "Internationalization" * 3
    ex = [{"tokens": ["of", long_word, "os"], "tags": ["O", "B-X", "O"], "_where": "x"}]
    labels = tasks.LabelSet.from_examples(ex, "tagging")
    n_long = len(sp_tok.encode(long_word))
    max_len = 1 + len(sp_tok.encode("of")) + n_long  # [CLS] of + long word: no room for [SEP]
    _, word_pos = tagging.featurize_tagging(ex, sp_tok, max_len, labels)
    assert word_pos[0][0] == 1 and word_pos[0][1:] == [-1, -1]
