#!/usr/bin/env bash
# A lent GPU's session in one command from the repository root (writes under $OUT, else
# /tmp/device_out):
#   bash benchmarks/device_session.sh            (BUDGET_S=540 by default)
# The environment, then benchmarks/device_session.py's plan in priority order inside the
# budget: this codebase against HF's PyTorch models (eager and torch.compile) on BERT-base
# and ModernBERT-base, the profile of the BERT-base step, its unrolled-layers variant, then
# the accelerator rows (--mode=device). Tables: $OUT/tables.md (benchmarks/device_tables.py).
set -uo pipefail
source benchmarks/device_env.sh
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    python3 -c "import jax, flax, optax, orbax.checkpoint, sys; print('python', sys.version.split()[0], 'jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__); print(jax.devices())"
    python3 -c "import jax._src.lib as l; print('cudnn', getattr(l, 'cuda_versions', None) and l.cuda_versions.cudnn_get_version())" || true
    python3 -c "import torch, transformers, importlib.util as u; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'flash_attn', u.find_spec('flash_attn') is not None)" || true
} 2>&1 | tee "$OUT/env.txt"
python3 -m benchmarks.device_session --out="$OUT" --budget_s="${BUDGET_S:-540}"
cat "$OUT/tables.md"
