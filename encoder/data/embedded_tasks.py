"""Downstream tasks built from text every Python install ships (no download).

    python -m encoder tasks --out DIR

writes one folder per task, each with a task.json naming its type and metrics
(the downstream suite's default battery, encoder/eval/suite), covering every
task type:

  topic          classification: a standard-library docstring -> its top-level
                 package, among the largest packages (balanced);
  same_package   sentence pair: two docstrings -> do they come from the same
                 top-level package? (half positives);
  relatedness    regression (STS-B-like, 0-5): two docstring sentences, scored
                 by provenance: 5 the same function, 3 the same module, 1.5 the
                 same package, 0 another package;
  arg_mentions   tagging (BIO): a function's signature then its docstring's
                 words; a docstring word is B-ARG when it names one of the
                 signature's parameters (needs the signature, i.e. context);
  api_qa         extractive QA: the context lists several functions of one
                 module as "name: first sentence of its docstring"; the question
                 is one of those sentences; the answer is its function's name;
  sts_relatedness  embedding STS (no fine-tuning, MTEB style): relatedness pairs
                 drawn afresh, test.jsonl only;
  api_retrieval  embedding retrieval in BEIR's layout (corpus.jsonl,
                 queries.jsonl, qrels/test.tsv): the query is a docstring's first
                 sentence, the relevant document the rest of that docstring; train.jsonl
                 holds contrastive pairs of the other first sentences (no test query).

Fine-tuned tasks write {train,dev,test}.jsonl, split by content hash, so the
splits never change and never overlap. Generation is deterministic (fixed
seeds, sorted walks) and takes seconds (parsing the stdlib dominates).
"""
import ast
import functools
import json
import os
import random
import sysconfig
import zlib


_SKIP = {"test", "tests", "idlelib", "lib2to3", "site-packages", "__pycache__", "tkinter",
         "turtledemo", "ensurepip", "pydoc_data"}


def documented_functions() -> list[dict]:
    """{package, module, name, doc, args} for every documented stdlib function/class, in the
    sorted walk's order: a fresh copy of one parse per process (parsing the ~560 files is
    7 s, and the suite's builders ask more than once)."""
    return [{**item, "args": list(item["args"])} for item in _parse_stdlib()]


@functools.lru_cache(maxsize=1)
def _parse_stdlib() -> tuple:
    root = sysconfig.get_paths()["stdlib"]
    items = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP)
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
            package = rel.split(".")[0].lstrip("_") or rel
            try:
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in _walk_statements(tree):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and \
                        not node.name.startswith("_"):
                    doc = ast.get_docstring(node)
                    if doc and len(doc) >= 30:
                        items.append({"package": package, "module": rel, "name": node.name,
                                      "doc": " ".join(doc.split()), "args": _arg_names(node)})
    return tuple(items)


# The nodes that hold statements: a def or class is a statement, so none lies below anything
# else (an expression, a lambda, an argument list).
_HOLDS_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)


def _walk_statements(tree):
    """ast.walk's order (breadth first) over the module and its statement-holding nodes only:
    the same defs in the same order, without visiting every expression node (ast.walk there
    was most of documented_functions' time after parsing)."""
    from collections import deque
    todo = deque([tree])
    while todo:
        node = todo.popleft()
        todo.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, _HOLDS_STATEMENTS))
        yield node


def _arg_names(node) -> list[str]:
    """A function's parameter names (no self/cls); a class has none here."""
    if not isinstance(node, ast.FunctionDef):
        return []
    a = node.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]


def split_of(text: str) -> str:
    h = zlib.crc32(text.encode()) % 10
    return "test" if h == 0 else "dev" if h == 1 else "train"


def topic_task(items, num_classes: int = 4, per_class: int = 400, seed: int = 0):
    by_pkg: dict[str, list] = {}
    for it in items:
        by_pkg.setdefault(it["package"], []).append(it)
    top = sorted(by_pkg, key=lambda p: (-len(by_pkg[p]), p))[:num_classes]
    rng = random.Random(seed)
    out = []
    for pkg in top:
        docs = sorted({it["doc"][:600] for it in by_pkg[pkg]})
        rng.shuffle(docs)
        out += [{"text": d, "label": pkg} for d in docs[:per_class]]
    return out


def pair_task(items, n: int = 2000, seed: int = 0):
    rng = random.Random(seed)
    by_pkg: dict[str, list] = {}
    for it in items:
        by_pkg.setdefault(it["package"], []).append(it["doc"][:300])
    big = [p for p in sorted(by_pkg) if len(by_pkg[p]) >= 20]
    out = []
    for i in range(n):
        p = rng.choice(big)
        a = rng.choice(by_pkg[p])
        if i % 2 == 0:
            b, label = rng.choice(by_pkg[p]), 1
        else:
            b, label = rng.choice(by_pkg[rng.choice([q for q in big if q != p])]), 0
        out.append({"text_a": a, "text_b": b, "label": label})
    return out


def first_sentence(doc: str) -> str:
    end = doc.find(". ")
    return doc[: end + 1] if 0 < end < 200 else doc[:200]


def qa_task(items, per_context: int = 5, seed: int = 0):
    rng = random.Random(seed)
    by_module: dict[str, list] = {}
    for it in items:
        by_module.setdefault(it["module"], []).append(it)
    out = []
    for module in sorted(by_module):
        funcs = list({it["name"]: it for it in by_module[module]}.values())
        rng.shuffle(funcs)
        for i in range(0, len(funcs) - per_context + 1, per_context):
            group = funcs[i:i + per_context]
            sentences = [first_sentence(f["doc"]) for f in group]
            if len(set(sentences)) < len(sentences):
                continue
            lines, starts = [], []
            pos = 0
            for f, s in zip(group, sentences):
                line = f"{f['name']}: {s}"
                starts.append(pos)
                lines.append(line)
                pos += len(line) + 1
            context = "\n".join(lines)
            k = rng.randrange(len(group))
            out.append({"question": sentences[k], "context": context,
                        "answer_text": group[k]["name"], "answer_start": starts[k]})
    return out


def write_task(out_dir: str, name: str, examples: list[dict], key) -> dict:
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    counts = {}
    for split in ("train", "dev", "test"):
        rows = [ex for ex in examples if split_of(key(ex)) == split]
        counts[split] = len(rows)
        with open(os.path.join(folder, f"{split}.jsonl"), "w") as f:
            for ex in rows:
                f.write(json.dumps(ex) + "\n")
    return counts


def rest_of(doc: str) -> str:
    """The docstring after its first sentence ('' when it has only one)."""
    return doc[len(first_sentence(doc)):].strip()


def relatedness_task(items, n: int = 2000, seed: int = 0):
    """Pairs of docstring sentences with a graded score from their provenance.

    A quarter each: the same function (first sentence vs the rest of its
    docstring, 5.0), the same module (3.0), the same package (1.5), another
    package (0.0): a relatedness scale like STS-B's 0-5.
    """
    rng = random.Random(seed)
    anchors = [it for it in items if len(rest_of(it["doc"])) >= 20]
    by_module: dict[str, list] = {}
    by_pkg: dict[str, list] = {}
    for it in items:
        by_module.setdefault(it["module"], []).append(it)
        by_pkg.setdefault(it["package"], []).append(it)
    out = []
    while len(out) < n:
        a = rng.choice(anchors)
        level = len(out) % 4
        if level == 0:
            text_b, score = rest_of(a["doc"])[:200], 5.0
        else:
            pool = (by_module[a["module"]] if level == 1 else
                    [it for it in by_pkg[a["package"]] if it["module"] != a["module"]]
                    if level == 2 else by_pkg[rng.choice(sorted(set(by_pkg) - {a["package"]}))])
            pool = [it for it in pool if it["name"] != a["name"]]
            if not pool:
                continue
            text_b, score = first_sentence(rng.choice(pool)["doc"]), (3.0, 1.5, 0.0)[level - 1]
        out.append({"text_a": first_sentence(a["doc"]), "text_b": text_b, "label": score})
    return out


_PUNCT = ".,;:()[]{}'\"`*"


def arg_mention_task(items, max_words: int = 40, seed: int = 0):
    """Signature + docstring words; docstring words naming a parameter are B-ARG.

    Parameters of one or two letters are left out (they collide with English
    words such as "a"); an example needs at least one mention.
    """
    rng = random.Random(seed)
    seen, out = set(), []
    for it in items:
        args = [a for a in it.get("args", []) if len(a) > 2]
        key = (it["module"], it["name"])
        if not args or key in seen:
            continue
        seen.add(key)
        signature = ["def", it["name"], "("] + [t for a in args for t in (a, ",")][:-1] + [")"]
        words = it["doc"].split()[:max_words]
        tags = ["B-ARG" if w.strip(_PUNCT) in args else "O" for w in words]
        if "B-ARG" in tags:
            out.append({"tokens": signature + words, "tags": ["O"] * len(signature) + tags})
    rng.shuffle(out)
    return out


def retrieval_task(items, num_queries: int = 400, seed: int = 0):
    """(corpus, queries, qrels) in BEIR's form: a first sentence finds the rest of its docstring.

    Every docstring with a rest is a corpus document (title: module.name); the
    queries are a fixed sample of their first sentences, kept only when unique.
    """
    rng = random.Random(seed)
    docs, firsts, ids = [], {}, set()
    for it in items:
        rest = rest_of(it["doc"])
        doc_id = f"{it['module']}.{it['name']}"
        if len(rest) < 20 or doc_id in ids:  # methods of one name in one module: the first
            continue
        ids.add(doc_id)
        docs.append({"_id": doc_id, "title": doc_id, "text": rest[:400]})
        firsts.setdefault(first_sentence(it["doc"]), []).append(doc_id)
    unique = sorted(q for q, ids in firsts.items() if len(ids) == 1)
    rng.shuffle(unique)
    queries = [{"_id": f"q{i}", "text": q} for i, q in enumerate(unique[:num_queries])]
    qrels = {q["_id"]: {firsts[q["text"]][0]: 1} for q in queries}
    return docs, queries, qrels


def retrieval_train_pairs(items, queries, limit: int = 4000, seed: int = 0) -> list[dict]:
    """Contrastive training pairs for api_retrieval: {"text_a": a first sentence,
    "text_b": its document's text} for the unique first sentences that are no test query."""
    docs, _, _ = retrieval_task(items, num_queries=0, seed=seed)
    text = {d["_id"]: d["text"] for d in docs}
    firsts: dict = {}
    for it in items:
        doc_id = f"{it['module']}.{it['name']}"
        if doc_id in text:
            firsts.setdefault(first_sentence(it["doc"]), set()).add(doc_id)
    test = {q["text"] for q in queries}
    pairs = [{"text_a": q, "text_b": text[next(iter(ids))]}
             for q, ids in sorted(firsts.items()) if len(ids) == 1 and q not in test]
    random.Random(seed).shuffle(pairs)
    return pairs[:limit]


def write_task_json(out_dir: str, name: str, meta: dict) -> None:
    with open(os.path.join(out_dir, name, "task.json"), "w") as f:
        json.dump(meta, f, indent=1)


def write_sts(out_dir: str, name: str, examples: list[dict]) -> dict:
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "test.jsonl"), "w") as f:
        for ex in examples:
            f.write(json.dumps(ex) + "\n")
    return {"test": len(examples)}


def write_retrieval(out_dir: str, name: str, docs, queries, qrels) -> dict:
    folder = os.path.join(out_dir, name)
    os.makedirs(os.path.join(folder, "qrels"), exist_ok=True)
    for file, rows in (("corpus.jsonl", docs), ("queries.jsonl", queries)):
        with open(os.path.join(folder, file), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    with open(os.path.join(folder, "qrels", "test.tsv"), "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, rel in qrels.items():
            for d, g in rel.items():
                f.write(f"{q}\t{d}\t{g}\n")
    return {"corpus": len(docs), "queries": len(queries)}


# task -> task.json: the type and the metrics the suite reports (eval.json's names).
TASK_META = {
    "topic": {"type": "classification", "metrics": ["accuracy"]},
    "same_package": {"type": "classification", "metrics": ["accuracy"]},
    "relatedness": {"type": "regression", "metrics": ["pearson", "spearman"]},
    "arg_mentions": {"type": "tagging", "metrics": ["entity_f1"]},
    "api_qa": {"type": "qa", "metrics": ["exact_match", "f1"]},
    "sts_relatedness": {"type": "sts"},
    "api_retrieval": {"type": "retrieval"},
}


def build_all(out_dir: str) -> dict:
    """Writes every task (and its task.json) under out_dir; returns the split sizes."""
    items = documented_functions()
    pair_key = lambda e: e["text_a"] + e["text_b"]  # noqa: E731
    counts = {
        "topic": write_task(out_dir, "topic", topic_task(items), lambda e: e["text"]),
        "same_package": write_task(out_dir, "same_package", pair_task(items), pair_key),
        "relatedness": write_task(out_dir, "relatedness", relatedness_task(items), pair_key),
        "arg_mentions": write_task(out_dir, "arg_mentions", arg_mention_task(items),
                                   lambda e: " ".join(e["tokens"])),
        "api_qa": write_task(out_dir, "api_qa", qa_task(items), lambda e: e["context"]),
        "sts_relatedness": write_sts(out_dir, "sts_relatedness",
                                     relatedness_task(items, n=400, seed=1)),
        "api_retrieval": write_retrieval(out_dir, "api_retrieval", *retrieval_task(items)),
    }
    # api_retrieval's training pairs (the contrastive task trains on them as they are)
    pairs = retrieval_train_pairs(items, retrieval_task(items)[1])
    with open(os.path.join(out_dir, "api_retrieval", "train.jsonl"), "w") as f:
        for ex in pairs:
            f.write(json.dumps(ex) + "\n")
    counts["api_retrieval"]["train"] = len(pairs)
    for name, meta in TASK_META.items():
        write_task_json(out_dir, name, meta)
    return counts


def build_once(folder: str) -> str:
    """folder, holding every task, built once per Python version (a stamp, built.json,
    says for which): a second call reads what the first wrote."""
    import sys
    stamp = os.path.join(folder, "built.json")
    version = {"python": sys.version, "tasks": sorted(TASK_META)}
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f) == version:
                return folder
    counts = build_all(folder)
    print(f"embedded tasks built in {folder}: {json.dumps(counts)}", flush=True)
    with open(stamp, "w") as f:
        json.dump(version, f)
    return folder


def _earlier_build(folder: str) -> bool:
    """A folder written by this command before it left a marker: every task folder, each
    with its task.json, and nothing else (a user's folder with a topic/ is not one)."""
    return set(os.listdir(folder)) == set(TASK_META) and all(
        os.path.isfile(os.path.join(folder, name, "task.json")) for name in TASK_META)


def write_tasks(out: str) -> dict:
    """build_all into `out`, which is new, empty or an earlier build: a user's folder is
    never written into (a topic/train.jsonl of theirs would be replaced)."""
    from encoder import errors
    errors.check_output(out, "tasks", "--out", legacy=_earlier_build)
    errors.mark_output(out, "tasks")
    return build_all(out)
