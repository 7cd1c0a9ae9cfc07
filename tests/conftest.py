"""Test set-up: eight simulated CPU devices (and XLA options), set before jax is imported."""
import os
import sys

# Eight simulated devices; LLVM at -O0 for this process: the in-process tests are
# compilation-bound (tests/model + tests/objectives: 3 min 53 s -> 2 min 36 s of CPU),
# while the subprocess runs, which are step-bound, set their own XLA_FLAGS.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8"
                           " --xla_backend_optimization_level=0").strip()


def _jaxlib_version():
    from importlib import metadata
    try:
        return tuple(int(x) for x in metadata.version("jaxlib").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return (0, 0)


# The CPU compiler's legacy (elemental) fusion emitters and one codegen thread: a tiny
# model's forward+backward compiles in about a third of the time (test_scan's post_ln
# pattern: 2.7 s -> 0.6 s a compile, both layouts, CPU time 10.9 s -> 4.2 s). Only on the
# jaxlib these were measured with: an XLA that does not know a flag aborts the process.
if _jaxlib_version() == (0, 10):
    os.environ["XLA_FLAGS"] += (" --xla_cpu_use_fusion_emitters=false"
                                " --xla_cpu_parallel_codegen_split_count=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Bytecode caches on for this session and the jobs it starts, whatever the machine set
# (this VM sets PYTHONDONTWRITEBYTECODE=1): otherwise every job process compiles the
# package from source and pytest rewrites every test module again in every worker.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# One persistent compilation cache per test session, shared with the subprocesses the
# tests launch: many tests compile the same tiny model's functions (measured in
# BUILD_NOTES.md, "Test suite time"). A fresh folder each session, so nothing stale.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jax-cache-")
    # Removed by the process that made it (the xdist controller, after its workers).
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], True)
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

E2E = os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Everything under tests/e2e/ is in the e2e lane, marked or not. A file is one xdist
    work unit (its module fixtures built once) unless it names a group (helpers.TORCH_GROUP).

    The workers take the units in this order (pytest.ini: --no-loadscope-reorder): the e2e
    files first, then the larger units first. xdist's own order (by test count alone) left
    the longest one-test e2e files, the README's commands and MiniLM mining (2-3 min each),
    for last, one worker running them while the other sat idle."""
    groups = {}
    for item in items:
        if str(item.path).startswith(E2E + os.sep):
            item.add_marker(pytest.mark.e2e)
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            mark = pytest.mark.xdist_group(item.nodeid.split("::")[0])
            item.add_marker(mark)
        groups.setdefault(mark.args[0], []).append(item)
    units = sorted(groups.values(), key=lambda unit: (
        unit[0].get_closest_marker("e2e") is None, -len(unit)))
    items[:] = [item for unit in units for item in unit]


@pytest.fixture
def tiny_cfg():
    """A small model config with dropout off, for property tests."""
    from encoder import config
    cfg = config.model_config("tiny")
    cfg.vocab_size = 101
    cfg.hidden_size = 32
    cfg.num_heads = 4
    cfg.intermediate_size = 64
    cfg.max_position = 64
    cfg.dropout = 0.0
    cfg.attention_dropout = 0.0
    return cfg


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory):
    """The README's pretraining recipe at runlocal size, 6 steps: a workdir every job can start
    from (its tokenizer and prepared corpus cache are reused by other tests). Tests only read
    it, so the xdist workers of a session share one: the first to need it trains it under a
    file lock, the others wait and read it (14 s of CPU a worker saved)."""
    import fcntl
    from encoder.jobs import pretrain
    from helpers import tiny_pretrain_config
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder above every worker's own
    d, built = root / "tiny_pretrained", root / "tiny_pretrained.built"
    with open(root / "tiny_pretrained.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():
            import shutil
            shutil.rmtree(d, ignore_errors=True)  # a worker that died half-way
            pretrain.train(tiny_pretrain_config(), str(d), devices=jax.devices()[:1])
            built.write_text("")
    return str(d)


@pytest.fixture(scope="session")
def shared_data(tiny_pretrained):
    """(tokenizer, prepared corpus cache) of the session's tiny_pretrained workdir."""
    return (os.path.join(tiny_pretrained, "tokenizer", "sp.model"),
            os.path.join(tiny_pretrained, "cache"))


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory):
    """Three files of real text (stdlib docs), blank-line documents, ~400 KB, and a
    SentencePiece model trained on them: (folder, tokenizer path)."""
    from encoder.data import corpus, tokenizer as tokenizer_lib
    d = tmp_path_factory.mktemp("text")
    docs = corpus.stdlib_documents()[:3000]
    for k in range(3):
        with open(d / f"part{k}.txt", "w", encoding="utf-8") as f:
            for doc in docs[k::3]:
                f.write(doc + "\n\n\n" if k == 1 else doc + "\n\n")
    tok = tokenizer_lib.train_sentencepiece(docs, str(d / "sp"), 2000)
    return str(d), tok


# ------------------------------------------------------------------ where the time goes
# ENCODER_TEST_PROFILE=FILE: one JSON line a test (set-up, call, teardown) with its wall
# and CPU seconds and the seconds JAX spent tracing, lowering and compiling in it; each xdist
# worker appends to FILE.<worker>. `python tests/profile_report.py FILE` sums them by file.
_PROFILE = os.environ.get("ENCODER_TEST_PROFILE")

if _PROFILE:
    import json
    import time
    from jax._src import monitoring

    _JAX_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
                   "/jax/core/compile/backend_compile_duration": "compile"}
    _jax_seconds: dict = {}

    def _on_duration(event, seconds, **_):
        if event in _JAX_EVENTS:
            key = _JAX_EVENTS[event]
            _jax_seconds[key] = _jax_seconds.get(key, 0.0) + seconds
            _jax_seconds[key + "_n"] = _jax_seconds.get(key + "_n", 0) + 1

    monitoring.register_event_duration_secs_listener(_on_duration)
    # this process's file starts empty: a reused FILE is not counted twice
    _PROFILE_FILE = f"{_PROFILE}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    if os.path.exists(_PROFILE_FILE):
        os.remove(_PROFILE_FILE)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        """One row a test: its set-up (fixtures it is first to need), call and teardown."""
        _jax_seconds.clear()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        try:
            return (yield)
        finally:
            row = {"test": item.nodeid, "wall": time.perf_counter() - wall0,
                   "cpu": time.process_time() - cpu0, **_jax_seconds}
            with open(_PROFILE_FILE, "a") as f:
                f.write(json.dumps(row) + "\n")
