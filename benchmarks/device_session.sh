#!/usr/bin/env bash
# The accelerator benchmark on a lent GPU, in one command from the repository root:
#   bash benchmarks/device_session.sh            (writes under $OUT, else /tmp/device_out)
set -uo pipefail
source benchmarks/device_env.sh
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    python3 -c "import jax, flax, optax, orbax.checkpoint, sys; print('python', sys.version.split()[0], 'jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__); print(jax.devices())"
    python3 -c "import jax._src.lib as l; print('cudnn', getattr(l, 'cuda_versions', None) and l.cuda_versions.cudnn_get_version())" || true
} 2>&1 | tee "$OUT/env.txt"
python3 -m encoder bench --mode=device --steps=10 2>"$OUT/device.stderr" | tee "$OUT/device.jsonl"
