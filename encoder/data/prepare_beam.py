"""The prepare job as an Apache Beam pipeline, for clusters (Dataflow, Flink, Spark).

    python -m encoder prepare --engine=beam --input=FILES --out=DIR \
        --beam_options="--runner=FlinkRunner --flink_master=HOST:8081 --environment_type=..."

The same plan, the same `process_unit` and the same unit markers and
manifest as the local engine (preparation.py): Beam only distributes the units.
The launching machine plans and trains (or installs) the tokenizer; each
Beam worker tokenizes its units straight into DIR, which must be a file
system every worker mounts (NFS, a FUSE-mounted bucket). A pipeline that
dies part-way is resumed by launching it again: finished units are skipped.
Without --beam_options it runs on Beam's DirectRunner (useful for tests; the
local engine is faster on one machine, BUILD_NOTES.md).
"""
import shlex
from typing import Callable, Iterable


def run(units: Iterable, process: Callable, beam_options: str = "") -> None:
    """process(unit) for every unit, spread over a Beam pipeline's workers.

    preparation.py plans the units and finalizes the manifest; this module only
    distributes the work (so it imports nothing from preparation.py).
    """
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    options = PipelineOptions(shlex.split(beam_options) or ["--runner=DirectRunner"])
    with beam.Pipeline(options=options) as p:
        _ = (p
             | "units" >> beam.Create(list(units))
             | "spread" >> beam.Reshuffle()
             | "tokenize" >> beam.Map(process))
