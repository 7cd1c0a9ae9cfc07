"""The import graph: config is plain data, dependencies point one way, no cycles.

Every `import encoder...` statement in the package (function-level ones too)
is an edge. Each module has a layer (RANKS, longest prefix wins); an edge may
only point to a lower layer or stay inside its own package. Deprecated alias
modules, kept for one release, are the named exceptions.
"""
import ast
import os
import subprocess
import sys

from helpers import ROOT

RANKS = {  # lowest first: a module may import only from layers below it
    "encoder.registry": 0,                       # the name-lookup helper every table uses
    "encoder.config": 1,
    "encoder.data": 2, "encoder.model": 2,
    "encoder.eval.metrics": 2, "encoder.eval.pseudo_perplexity": 2,  # pure metric functions
    "encoder.objectives": 3, "encoder.checkpoints.store": 3,
    "encoder.interop": 4,                        # HF readers: tensors <-> parameter trees
    "encoder.interop.export": 9,                 # the export CLI: starts from any source
    "encoder.checkpoints": 5,                    # sources.py: the door every job starts from
    "encoder.train": 6,
    "encoder.finetune": 7,
    "encoder.eval": 8,                           # evaluate / embed jobs
    "encoder.eval.suite": 8,                     # the downstream suite (runs fine-tuning jobs)
    "encoder": 9,                                # main, ablate, bench: entry points
    "encoder.suite": 9,                          # python -m encoder.suite
}
ALIASES = {"encoder.train.finetune", "encoder.train.finetune_defaults",
           "encoder.train.loop", "encoder.train.checkpoint", "encoder.train.pretrained"}


def rank(module: str) -> int:
    best = max((p for p in RANKS if module == p or module.startswith(p + ".")), key=len)
    return RANKS[best]


def package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module


def modules() -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "encoder")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                mod = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[mod.removesuffix(".__init__")] = path
    return out


def edges(mods: dict[str, str]) -> set[tuple[str, str]]:
    """(importer, imported module) for every encoder import, resolved to a module file."""
    found = set()
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(open(path).read())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods
                           else node.module for a in node.names]
            for t in targets:
                if t.startswith("encoder") and t != mod:
                    found.add((mod, t))
    return found


def test_dependencies_point_downwards():
    mods = modules()
    upward = [f"{a} -> {b}" for a, b in sorted(edges(mods))
              if a not in ALIASES and package(a) != package(b) and rank(a) <= rank(b)
              and b != "encoder"]
    assert not upward, "imports that point up or sideways:\n" + "\n".join(upward)


def test_no_import_cycles():
    mods = modules()
    graph: dict[str, set[str]] = {}
    for a, b in edges(mods):
        if b in mods and b != "encoder":
            graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack + [node, nxt]))
            if nxt not in state:
                visit(nxt, stack + [node])
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_the_rank_table_covers_every_package():
    for mod in modules():
        assert rank(mod) >= 0  # max() over no prefix would raise


def test_config_is_plain_data():
    code = ("import sys, encoder.config, encoder.finetune.config; "
            "print(sorted(m for m in sys.modules if m.startswith('encoder')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, check=True).stdout
    loaded = set(eval(out))  # noqa: S307 - our own printed list
    assert loaded <= {"encoder", "encoder.config", "encoder.registry", "encoder.finetune",
                      "encoder.finetune.config"}, loaded
    assert "jax" not in out
