"""The prepare job as an Apache Beam pipeline, for clusters (Dataflow, Flink, Spark).

    python -m encoder.data.prepare --engine=beam --input=FILES --out=DIR \
        --beam_options="--runner=FlinkRunner --flink_master=HOST:8081 --environment_type=..."

The same plan, the same `process_unit` and the same unit markers and
manifest as the local engine (prepare.py): Beam only distributes the units.
The launching machine plans and trains (or installs) the tokenizer; each
Beam worker tokenizes its units straight into DIR, which must be a file
system every worker mounts (NFS, a FUSE-mounted bucket). A pipeline that
dies part-way is resumed by launching it again: finished units are skipped.
Without --beam_options it runs on Beam's DirectRunner (useful for tests; the
local engine is faster on one machine, BUILD_NOTES.md).
"""
import shlex

from encoder.data import prepare as prepare_lib


def prepare(spec: str, out: str, s: prepare_lib.Settings, tokenizer: str = "",
            vocab_size: int = 32768, tokenizer_type: str = "unigram",
            sample_chars: int = 4_000_000, beam_options: str = "",
            command: str = "") -> dict | None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    job = prepare_lib.plan(spec, out, s, tokenizer, vocab_size, tokenizer_type, sample_chars)
    todo = job.pending()
    if todo:
        options = PipelineOptions(shlex.split(beam_options) or ["--runner=DirectRunner"])
        with beam.Pipeline(options=options) as p:
            _ = (p
                 | "units" >> beam.Create(job.jobs(todo))
                 | "spread" >> beam.Reshuffle()
                 | "tokenize" >> beam.Map(prepare_lib.process_unit))
    return prepare_lib.finalize(job, command)
