# Sourced by the device scripts (run from the repository root on a lent GPU machine): the
# lent image has jax, flax, optax and orbax but lacks a few of this codebase's packages and
# reaches no registry, so they travel as wheels in .whl/ (BUILD_NOTES, "GPU runs").
OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT"
if ! python3 -c "import grain, ml_collections, tensorboardX, portpicker" 2>/dev/null \
        && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
