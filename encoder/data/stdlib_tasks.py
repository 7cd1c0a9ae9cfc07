"""Downstream tasks built from text every Python install ships (no download).

    python -m encoder.data.stdlib_tasks --out DIR

writes DIR/{topic,same_package,api_qa}/{train,dev,test}.jsonl:

  topic         classification: a standard-library docstring -> its top-level
                package, among the largest packages (balanced);
  same_package  sentence pair: two docstrings -> do they come from the same
                top-level package? (half positives);
  api_qa        extractive QA: the context lists several functions of one
                module as "name: first sentence of its docstring"; the question
                is one of those sentences; the answer is its function's name.

Splits are by content hash, so they never change and never overlap.
"""
import ast
import json
import os
import random
import sysconfig
import zlib

from absl import app, flags

_SKIP = {"test", "tests", "idlelib", "lib2to3", "site-packages", "__pycache__", "tkinter",
         "turtledemo", "ensurepip", "pydoc_data"}


def documented_functions() -> list[dict]:
    """{package, module, name, doc} for every documented stdlib function/class."""
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
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and \
                        not node.name.startswith("_"):
                    doc = ast.get_docstring(node)
                    if doc and len(doc) >= 30:
                        items.append({"package": package, "module": rel, "name": node.name,
                                      "doc": " ".join(doc.split())})
    return items


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


def build_all(out_dir: str) -> dict:
    items = documented_functions()
    return {
        "topic": write_task(out_dir, "topic", topic_task(items), lambda e: e["text"]),
        "same_package": write_task(out_dir, "same_package", pair_task(items),
                                   lambda e: e["text_a"] + e["text_b"]),
        "api_qa": write_task(out_dir, "api_qa", qa_task(items), lambda e: e["context"]),
    }


def main(argv):
    del argv
    print(json.dumps(build_all(flags.FLAGS.out)))


if __name__ == "__main__":
    flags.DEFINE_string("out", None, "output folder", required=True)
    app.run(main)
