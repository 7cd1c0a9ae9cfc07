"""Ahead-of-time compilation: the train step compiled for hardware this machine does not have.

`aot` is JAX's own name for it (jax.jit(f).lower(...).compile(), "Ahead-of-time lowering
and compilation" in JAX's docs; MaxText's train_compile.py does the same for TPUs). Here:

  compile_report.py   the step compiled from shapes alone, read into one JSON row: memory
                      per chip, FLOPs, collectives, kernels, fit, a step-time bound
                      (`python -m encoder bench --mode=compile`)
  hlo.py              reading the compiled program's HLO text
  targets.py          what it compiles for: TPU topologies (libtpu), GPU nodes (XLA's
                      CUDA compiler)
  chips.py            the chips' datasheet figures (HBM, peak FLOP/s, bandwidths)
  memory.py           the lower bound a run checks at start-up, before anything compiles
  attention_trace.py  what the step's attention was compiled to, recorded at trace time
  cudnn_target.py     jax's cuDNN checks answered for the target GPU, not the host

It sits above the trainer library (encoder/train/) and below the jobs: a run reads only a
chip's peak FLOP/s (for MFU) and the memory check from here.
"""
