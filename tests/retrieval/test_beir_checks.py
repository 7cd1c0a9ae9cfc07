"""BEIR inputs checked against what trec_eval's measures assume: judgements that
name documents or queries the files lack, repeated ids, grades that are not integers.
Refused with counts and the first offender's file:line, or (a minority of unknown ids) a
warning the suite's table repeats. The reported case: every qrels line named an id absent
from corpus.jsonl and BM25 scored nDCG@10 0.00, exit 0, no warning."""
import json
import os

import pytest

from encoder.retrieval import beir


def write_beir(folder, docs, queries, qrels) -> dict:
    """A BEIR folder: docs {id: text}, queries {id: text}, qrels [(q, d, grade-as-text)]."""
    os.makedirs(os.path.join(folder, "qrels"), exist_ok=True)
    files = {"corpus": os.path.join(folder, "corpus.jsonl"),
             "queries": os.path.join(folder, "queries.jsonl"),
             "qrels": os.path.join(folder, "qrels", "test.tsv")}
    with open(files["corpus"], "w") as f:
        for i, text in docs:
            f.write(json.dumps({"_id": i, "title": "", "text": text}) + "\n")
    with open(files["queries"], "w") as f:
        for i, text in queries:
            f.write(json.dumps({"_id": i, "text": text}) + "\n")
    with open(files["qrels"], "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, d, g in qrels:
            f.write(f"{q}\t{d}\t{g}\n")
    return files


DOCS = [(f"d{i}", f"document about topic {i} and words {i}") for i in range(8)]
QUERIES = [(f"q{i}", f"topic {i}") for i in range(4)]


def test_qrels_naming_only_absent_documents_are_refused_with_counts(tmp_path):
    files = write_beir(tmp_path, DOCS, QUERIES, [(f"q{i}", f"doc-{i}", 1) for i in range(4)])
    with pytest.raises(beir.BeirDataError) as e:
        beir.read_files(files)
    msg = str(e.value)
    assert msg.startswith(f"{files['qrels']}:2: 4 of 4 relevant judgements name documents "
                          f"absent from {files['corpus']} (first: 'doc-0')"), msg
    assert "\n" not in msg


def test_a_minority_of_unknown_ids_is_a_warning(tmp_path, capsys):
    qrels = [(f"q{i}", f"d{i}", 1) for i in range(4)] + [("q0", "gone", 2), ("q9", "d1", 1)]
    files = write_beir(tmp_path, DOCS, QUERIES, qrels)
    corpus, queries, got, skipped, warnings = beir.read_files(files)
    assert len(corpus) == 8 and [q["_id"] for q in queries] == ["q0", "q1", "q2", "q3"]
    assert warnings == [
        f"{files['qrels']}:6: 1 of 6 relevant judgements name documents absent from "
        f"{files['corpus']} (first: 'gone'); they count as misses",
        f"{files['qrels']}:7: 1 of 6 relevant judgements name queries absent from "
        f"{files['queries']} (first: 'q9'); they count as misses"]
    assert got["q0"] == {"d0": 1, "gone": 2}
    _, _, _, skipped = beir.read_beir(str(tmp_path))  # the library reader prints them
    assert skipped["warnings"] == warnings and "warning: " in capsys.readouterr().err


def test_repeated_ids_are_refused_naming_both_lines(tmp_path):
    files = write_beir(tmp_path, DOCS + [("d3", "another text")], QUERIES,
                       [("q0", "d0", 1)])
    with pytest.raises(beir.BeirDataError, match=r"corpus\.jsonl:9: document id 'd3' again "
                                                 r"\(first at line 4\); 1 repeated document id"):
        beir.read_files(files)
    files = write_beir(tmp_path, DOCS, QUERIES + [("q1", "x"), ("q2", "y")], [("q0", "d0", 1)])
    with pytest.raises(beir.BeirDataError, match=r"queries\.jsonl:5: query id 'q1' again .* "
                                                 r"2 repeated query ids"):
        beir.read_files(files)


@pytest.mark.parametrize("grade", ["relevant", "1.5", "", "nan"])
def test_a_grade_that_is_not_an_integer_is_refused(tmp_path, grade):
    files = write_beir(tmp_path, DOCS, QUERIES, [("q0", "d0", 1), ("q1", "d1", grade),
                                                 ("q2", "d2", grade)])
    with pytest.raises(beir.BeirDataError, match=rf"test\.tsv:3: score {grade!r} is not an "
                                                 r"integer grade \(2 lines like it\)"):
        beir.read_files(files)


def test_integer_grades_and_ids_read_as_the_qrels_name_them(tmp_path):
    files = write_beir(tmp_path, [(5, "five"), ("d1", "one")], [(7, "seven?")],
                       [("7", "5", "1.0"), ("7", "d1", 0)])
    corpus, queries, qrels, _, warnings = beir.read_files(files)
    assert [d["_id"] for d in corpus] == ["5", "d1"] and queries[0]["_id"] == "7"
    assert qrels == {"7": {"5": 1, "d1": 0}} and warnings == []
    assert beir.evaluate_run({"7": {"5": 1.0, "d1": 0.5}}, qrels)["ndcg_at_10"] == 1.0


def test_a_pair_judged_twice_or_no_relevant_judgement_is_refused(tmp_path):
    files = write_beir(tmp_path, DOCS, QUERIES, [("q0", "d0", 1), ("q0", "d0", 0)])
    with pytest.raises(beir.BeirDataError, match=r"test\.tsv:3: query 'q0' judges document "
                                                 r"'d0' again, grade 0 after 1"):
        beir.read_files(files)
    files = write_beir(tmp_path, DOCS, QUERIES, [("q0", "d0", 0)])
    with pytest.raises(beir.BeirDataError, match="no judgement has a grade of 1 or more"):
        beir.read_files(files)


def _suite(tasks, out):
    from encoder.studies.suite import battery
    return battery.run_suite(battery.SuiteOptions(init_from="", baseline="bm25",
                                                  workdir=str(out), tasks=str(tasks),
                                                  preset="runlocal"))


def test_the_suite_refuses_unknown_documents_before_scoring(tmp_path):
    """The reported case, through the suite's BM25 baseline: refused with the counts, no
    suite.json (it used to report nDCG@10 0.00, exit 0)."""
    task = tmp_path / "tasks" / "lookup"
    files = write_beir(task, DOCS, QUERIES, [(f"q{i}", f"missing{i}", 1) for i in range(4)])
    with pytest.raises(beir.BeirDataError, match=r"4 of 4 relevant judgements name documents "
                                                 r"absent from .*corpus\.jsonl"):
        _suite(task, tmp_path / "out")
    assert not os.path.exists(tmp_path / "out" / "suite.json")
    # a minority: scored, and the warning is in the table's notes
    with open(files["qrels"], "w") as f:
        f.write("query-id\tcorpus-id\tscore\n" + "".join(
            f"q{i}\td{i}\t1\n" for i in range(4)) + "q1\tmissing\t1\n")
    result = _suite(task, tmp_path / "out")
    assert result["failed"] == 0 and result["tasks"][0]["median"] > 0
    with open(tmp_path / "out" / "suite.md") as f:
        md = f.read()
    assert ("- lookup: " + files["qrels"] + ":6: 1 of 5 relevant judgements name documents "
            "absent from") in md
