"""`python -m encoder prepare`: text -> a prepared corpus.

What is written and how a rerun resumes: encoder/data/preparation.py. The input is any
format encoder/data/formats.py reads (text, compressed text, JSONL, Parquet, Arrow, MDS,
token ids), detected per file or given with --format; what was skipped or repaired is
printed with its share of the input.
"""
import os
import sys

from absl import flags

from encoder import errors
from encoder.data import formats, pairs, preparation, shards, tokenizer as tokenizer_lib
from encoder.commands.one_line import one_line_errors

flags.DEFINE_string("input", "", "files, folders or globs (comma-separated), or 'stdlib'")
flags.DEFINE_string("out", None, "the prepared corpus folder", required=True)
flags.DEFINE_string("format", "", "the input's format: " + ", ".join(formats.FORMAT_NAMES)
                    + "; empty: each file's own (its marks, extension, first lines)")
flags.DEFINE_string("text_field", "text", "the JSONL field, Parquet/Arrow/MDS column that "
                    "holds the text (or token ids; with --format=tokens: input_ids)")
flags.DEFINE_string("tokenizer", "", "an existing tokenizer: a sentencepiece .model or any "
                    "tokenizer.json folder (WordPiece, byte-level BPE, unigram)")
flags.DEFINE_integer("vocab_size", 32768, "vocabulary of the tokenizer trained here")
flags.DEFINE_integer("num_workers", 0, "worker processes (0: all cores)")
flags.DEFINE_enum("tokenizer_type", "unigram", list(tokenizer_lib.TOKENIZER_TYPES),
                  "the tokenizer trained here: sentencepiece unigram or bpe, or byte-level BPE "
                  "(byte_bpe, a tokenizer.json folder)")
flags.DEFINE_integer("sample_chars", 4_000_000, "tokenizer training sample (characters)",
                     lower_bound=1)
flags.DEFINE_float("valid_fraction", 0.05, "held-out share of documents (content hash)")
flags.DEFINE_bool("one_doc_per_line", False, "one document per line (else blank-line blocks)")
flags.DEFINE_integer("max_line_chars", 100_000, "longer lines are skipped and counted")
flags.DEFINE_float("shard_mb", 16.0, "MB of text per unit (one shard per split each)")
flags.DEFINE_integer("machine_index", 0, "this machine's share: units i with i % M == this")
flags.DEFINE_integer("num_machines", 1, "machines sharing the job (M)")
flags.DEFINE_bool("tokenizer_only", False, "train/install the tokenizer into --out and stop")
flags.DEFINE_enum("engine", "local", ["local", "beam"], "local processes or Apache Beam")
flags.DEFINE_string("beam_options", "", "Beam pipeline options, e.g. '--runner=FlinkRunner'")
flags.DEFINE_enum("records", "text", list(pairs.RECORDS), "text: documents to pretrain "
                  "on; pairs: JSONL retrieval pairs for the contrastive task")
flags.DEFINE_string("query_prefix", "", "pairs: text put before each query")
flags.DEFINE_string("passage_prefix", "", "pairs: text put before each passage")
flags.DEFINE_bool("verify", False, "check every shard of --out against the manifest, stop")
FLAGS = flags.FLAGS


@one_line_errors(resumable=True)
def main(argv):
    if len(argv) > 1:
        raise errors.UsageError(f"unexpected arguments: {argv[1:]}")
    is_pairs = FLAGS.records == "pairs"
    # pair lines are one a line; their held-out share is 0 unless asked (a dev file is apart)
    s = preparation.Settings(
        FLAGS.one_doc_per_line or is_pairs, FLAGS.max_line_chars,
        FLAGS.valid_fraction if FLAGS["valid_fraction"].present or not is_pairs else 0.0,
        FLAGS.shard_mb, FLAGS.records, FLAGS.query_prefix, FLAGS.passage_prefix,
        format=FLAGS.format, text_field=FLAGS.text_field)
    if FLAGS.verify:
        checked = shards.PreparedCorpus(FLAGS.out).verify_all()
        print(f"{FLAGS.out}: verified " + "; ".join(checked))
        return
    if not FLAGS.input:
        raise errors.UsageError("--input is required (files, folders, globs, or 'stdlib')")
    if FLAGS.records == "pairs" and not FLAGS.tokenizer:
        raise errors.UsageError("--records=pairs needs --tokenizer=PATH: the model's own "
                                "tokenizer (a pair corpus trains a model that has one)")
    if FLAGS.records == "pairs" and FLAGS.input == preparation.STDLIB:
        raise errors.UsageError("--records=pairs reads JSONL pair files, not 'stdlib' (make "
                                "pairs with python -m encoder tasks)")
    if FLAGS.tokenizer and FLAGS["vocab_size"].present:
        raise errors.UsageError("give --tokenizer or --vocab_size, not both")
    if FLAGS.valid_fraction >= 1.0:
        raise errors.UsageError(f"--valid_fraction={FLAGS.valid_fraction}: expected 0 <= x < 1 "
                                "(the held-out share; at 1 no document is left to train on)")
    if FLAGS.num_workers < 0:
        raise errors.UsageError(f"--num_workers={FLAGS.num_workers}: expected >= 0")
    preparation.check_settings(s, None if FLAGS.tokenizer else FLAGS.vocab_size,
                               FLAGS.machine_index, FLAGS.num_machines)
    command = " ".join(["python -m encoder prepare"] + sys.argv[1:])
    if FLAGS.tokenizer_only:
        job = preparation.plan(FLAGS.input, FLAGS.out, s, FLAGS.tokenizer, FLAGS.vocab_size,
                               FLAGS.tokenizer_type, FLAGS.sample_chars, command=command)
        print(f"tokenizer: {job.tokenizer_path}")
        return
    if FLAGS.engine == "beam":
        manifest = preparation.prepare_with_beam(
            FLAGS.input, FLAGS.out, s, FLAGS.tokenizer, FLAGS.vocab_size, FLAGS.tokenizer_type,
            FLAGS.sample_chars, FLAGS.beam_options, command)
    else:
        manifest = preparation.prepare(
            FLAGS.input, FLAGS.out, s, FLAGS.tokenizer, FLAGS.vocab_size,
            FLAGS.num_workers or os.cpu_count() or 1, FLAGS.tokenizer_type, FLAGS.sample_chars,
            FLAGS.machine_index, FLAGS.num_machines, progress=True, command=command)
    if manifest is None:
        print(f"machine {FLAGS.machine_index} of {FLAGS.num_machines}: its units are done; the "
              "manifest is written by the machine that finishes last (or run once more with "
              "--num_machines=1 to write it)")
        return
    print(preparation.summary(manifest))
    preparation.say_input(manifest)
    if FLAGS.records == "pairs":
        print("train with: python -m encoder run --config=experiments/finetune.py:"
              f"task=contrastive --config.init_from=SOURCE --config.data.train_file="
              f"{FLAGS.out}" + "".join(f" --config.contrastive.{k}={v!r}" for k, v in
                                       (("query_prefix", s.query_prefix),
                                        ("passage_prefix", s.passage_prefix)) if v))
    else:
        print(f"train with: --config.data.train_files={FLAGS.out}")
