"""Comments and docstrings name what exists: every path (`encoder/jobs/pretrain.py`,
`tasks/readers.py`) and every dotted name (`encoder.model.models.validate_config`) they
mention resolves against the tree as it is, so a file moved or a function renamed cannot
leave a pointer to nowhere behind.

Resolved from the files alone (no import): a path against the repository root, the
commenting file's folder and the folders above it; a dotted name to the longest module
prefix in the file tree, then each remaining part to a name that module (or that class)
defines, found by a cheap AST scan. Placeholders (`experiments/NAME.py`,
`encoder/commands/<name>.py`, `WORKDIR/job_config.py`) and files a run writes are not
paths of the tree and are left alone.
"""
import ast
import functools
import io
import os
import re
import tokenize

from helpers import ROOT

SCANNED = ("encoder", "experiments", "benchmarks")  # the product's code, and its recipes
TOP = ("encoder", "experiments", "benchmarks", "tests", "docs", "reports", ".ci")
# files a run or a command writes (named in comments as what they are), not files of the tree
WRITTEN = {"job_config.py"}
# files of other codebases a comment cites (what a piece follows), by name -> whose
ELSEWHERE = {"train_compile.py": "MaxText", "configure_finetuning.py": "ELECTRA"}

# a path: folders and a file with an extension, or a folder ending in "/"
PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+(?:[\w-]+\.(?:py|md|sh|txt|toml|ini)\b)?"
                  r"|[\w-]+\.py\b)")
DOTTED = re.compile(r"(?<![\w./-])encoder(?:\.[A-Za-z_]\w*)+")
PLACEHOLDER = re.compile(r"[<>{}*$]|(?:^|/)[A-Z][A-Z0-9_]*(?:/|\.py\b|$)")


def code_files() -> list[str]:
    out = []
    for top in SCANNED:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            out += [os.path.join(folder, f) for f in files if f.endswith((".py", ".sh"))]
    return sorted(out)


def prose(path: str) -> list[tuple[int, str]]:
    """(first line, text) of every comment block (consecutive comment lines, as one text)
    and every docstring of a file."""
    source = open(path, encoding="utf-8").read()
    if path.endswith(".sh"):
        comments = [(i, line.split("#", 1)[1]) for i, line in
                    enumerate(source.splitlines(), 1) if line.lstrip().startswith("#")]
    else:
        comments = [(tok.start[0], tok.string[1:]) for tok in
                    tokenize.generate_tokens(io.StringIO(source).readline)
                    if tok.type == tokenize.COMMENT]
    out: list[tuple[int, str]] = []
    for line, text in comments:
        if out and line == out[-1][0] + out[-1][1].count("\n") + 1:
            out[-1] = (out[-1][0], out[-1][1] + "\n" + text)
        else:
            out.append((line, text))
    if path.endswith(".py"):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    out.append((node.body[0].lineno, doc))
    return out


def unwrapped(text: str) -> str:
    """A path broken over two lines ("encoder/retrieval/" then "retriever.py") as one."""
    return re.sub(r"/[ \t]*\n\s*", "/", text)


def path_exists(ref: str, where: str) -> bool:
    """A path as a comment in file `where` names it: from the repository root, or from the
    file's folder or a folder above it (inside encoder/, `tasks/readers.py` is
    encoder/tasks/readers.py)."""
    ref = ref.rstrip("/")
    if ref.split("/")[0] in TOP:
        return os.path.exists(os.path.join(ROOT, ref))
    folder = os.path.dirname(where)
    while folder.startswith(ROOT):
        if os.path.exists(os.path.join(folder, ref)):
            return True
        folder = os.path.dirname(folder)
    # a bare file name ("glue.py" in a list after "encoder/tasks/:"): somewhere in the tree
    return "/" not in ref and ref in tree_file_names()


@functools.lru_cache(maxsize=None)
def tree_file_names() -> frozenset:
    return frozenset(name for top in TOP
                     for _, _, files in os.walk(os.path.join(ROOT, top)) for name in files)


@functools.lru_cache(maxsize=None)
def defined(path: str) -> dict[str, ast.AST | None]:
    """The names a module defines at its top level (functions, classes, assignments,
    imports, and those under a top-level if/try/with): a class maps to its node, to look
    its members up; every other name to None."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    return _names(tree.body)


def _names(body) -> dict[str, ast.AST | None]:
    out: dict[str, ast.AST | None] = {}
    for node in body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update({(a.asname or a.name).split(".")[0]: None for a in node.names})
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                out.update({n.id: None for n in ast.walk(t) if isinstance(n, ast.Name)})
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                # names a module serves lazily (a module __getattr__) are listed in __all__
                out.update({c.value: None for c in ast.walk(node.value)
                            if isinstance(c, ast.Constant) and isinstance(c.value, str)})
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            out.update(_names(getattr(node, "body", [])))
    return out


def module_file(dotted: str) -> str | None:
    """The file of a module, its package's __init__.py, or "" for a package folder without
    one (a namespace package: it defines nothing but its modules)."""
    base = os.path.join(ROOT, *dotted.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return "" if os.path.isdir(base) else None


def dotted_exists(name: str) -> bool:
    """encoder.a.b.c: the longest prefix that is a module of the tree, then each remaining
    part a name its module or class defines (an attribute of an instance, a dict key or
    anything past a function is not followed)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:cut]))
        if path is None:
            continue
        scope = defined(path) if path else {}
        for part in parts[cut:]:
            if part not in scope:
                return False
            node = scope[part]
            if node is None:
                return True
            scope = _names(node.body) | {n.attr: None for n in ast.walk(node)
                                         if isinstance(n, ast.Attribute)}
        return True
    return False


def broken_references() -> list[str]:
    found = []
    for path in code_files():
        rel = os.path.relpath(path, ROOT)
        for first, text in prose(path):
            text = unwrapped(text)
            for match in PATH.finditer(text):
                ref, line = match.group(1), first + text[:match.start()].count("\n")
                if (PLACEHOLDER.search(ref) or ref in WRITTEN or ref in ELSEWHERE
                        or "//" in ref or not (ref.endswith((".py", "/")) or "/" in ref)):
                    continue
                if ref.endswith("/") and ref.split("/")[0] not in TOP:
                    continue  # a bare word before a slash ("and/or", "read/write")
                if not path_exists(ref, path):
                    found.append(f"{rel}:{line}: path {ref}")
            for match in DOTTED.finditer(text):
                name, line = match.group(0), first + text[:match.start()].count("\n")
                if name.endswith(".py"):
                    continue  # a file name, checked as a path
                if not dotted_exists(name.rstrip(".")):
                    found.append(f"{rel}:{line}: name {name}")
    return found


def test_comments_name_paths_and_modules_that_exist():
    broken = broken_references()
    assert not broken, ("comments or docstrings name what does not exist:\n"
                        + "\n".join(broken))


def test_the_checker_tells_what_exists_from_what_does_not():
    assert dotted_exists("encoder.config.base_config") and dotted_exists("encoder.encode")
    assert dotted_exists("encoder.commands.ALIASES")
    assert not dotted_exists("encoder.config.no_such_function")
    assert not dotted_exists("encoder.no_such_module.thing")
    here = os.path.join(ROOT, "encoder", "jobs", "pretrain.py")
    assert path_exists("encoder/config.py", here) and path_exists("tasks/readers.py", here)
    assert not path_exists("encoder/no_such.py", here)
    assert not path_exists("checkpoints/no_such.py", here)
