"""The import graph: config is plain data, dependencies point one way, no cycles.

Every `import encoder...` statement in the package (function-level ones too)
is an edge. Each folder has one rank (RANKS); an edge may only point to a lower
rank or stay inside its own folder. The only exemption is the public names of the
commands (SHIMS: `python -m encoder.main`, `encoder.data.prepare`, ...), each one line
over encoder/commands/, which nothing imports.
"""
import ast
import os
import subprocess
import sys

from helpers import ROOT

RANKS = {  # one rank per folder, lowest first: a module may import only from lower ranks
    "encoder.registry": 0,     # the name-lookup helper every table uses
    "encoder.errors": 0,       # user-facing errors, the one-line wrapper, owned output folders
    "encoder.tether": 0,       # child processes that end with their parent (studies, jobs)
    "encoder.config": 1,       # the pretraining config as plain data
    "encoder.ranges": 1,       # every numeric field's range, and the rules between fields
    "encoder.data": 2, "encoder.model": 2,
    "encoder.objectives": 3,   # the training games and the pretraining step's pieces
    "encoder.eval": 4,         # metrics and evaluators over arrays and apply functions
    "encoder.retrieval": 5,    # retrieval library: losses, heads, MaxSim, search, BEIR, BM25
    "encoder.tasks": 6,        # one file per task type (sits on data, model, eval)
    "encoder.interop": 6,      # HF families as tables: tensors <-> parameter trees
    "encoder.checkpoints": 7,  # the one door every job starts from
    "encoder.finetune": 7,     # fine-tuning's parts: its config, defaults, LoRA, frozen modes
    "encoder.train": 8,        # the trainer library: steps (pretraining's, fine-tuning's), loop
    "encoder.aot": 9,          # ahead-of-time compiles: the compile report, targets, chips
    "encoder.jobs": 10,        # the programs
    "encoder.studies": 11,     # runs of many jobs: ablations, the suite
    "encoder.commands": 12,    # every command: its flags, then one call into a job
    "encoder": 13,             # the package itself and `python -m encoder` (__main__)
}
SHIM_PREFIX = '"""`python -m '  # a shim's docstring names the module name scripts type


def shims() -> dict[str, str]:
    """The kept public names (python -m NAME) and the command each one runs."""
    from encoder.commands import ALIASES
    return ALIASES


def rank(module: str) -> int:
    if module in shims():
        return RANKS["encoder"]
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
              if package(a) != package(b) and rank(a) <= rank(b)
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


def test_each_kept_name_is_a_one_line_shim_that_nothing_imports():
    mods = modules()
    for name, command in shims().items():
        lines = open(mods[name]).read().splitlines()
        assert len(lines) == 2 and lines[0].startswith(SHIM_PREFIX), (name, lines)
        assert lines[1].startswith('if __name__ == "__main__": from encoder.commands import '
                                   f'launch; launch("{command}")'), (name, lines[1])
        assert os.path.isfile(os.path.join(ROOT, "encoder", "commands", f"{command}.py"))
    imported = {b for _, b in edges(mods)}
    assert not imported & set(shims()), imported & set(shims())


def test_no_main_guard_outside_the_shims():
    """Commands live in encoder/commands/ (run by launch), not behind __main__ guards."""
    mods = modules()
    guarded = [m for m, path in mods.items() if '__name__ == "__main__"' in open(path).read()
               and m not in shims()]
    assert not guarded, guarded


def test_no_library_module_reads_the_command_line():
    """Flags are defined and read in encoder/commands/ only: a job takes plain arguments."""
    mods = modules()
    readers = [m for m, path in mods.items() if not m.startswith("encoder.commands")
               and ("flags.FLAGS" in open(path).read() or "DEFINE_" in open(path).read())]
    assert not readers, readers
