"""`python -m encoder import_hf`: a HuggingFace folder as a
params folder of this codebase; the job is encoder/jobs/import_hf.py."""
from absl import flags, logging

from encoder import errors
from encoder.commands.one_line import one_line_errors

flags.DEFINE_string("checkpoint", None, "the HuggingFace checkpoint folder", required=True)
flags.DEFINE_string("out", None, "the params folder to write (orbax, with the tokenizer)",
                    required=True)
FLAGS = flags.FLAGS


@one_line_errors
def main(argv):
    if len(argv) > 1:
        raise errors.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
    from encoder.jobs import import_hf
    count = import_hf.import_folder(FLAGS.checkpoint, FLAGS.out)
    print(f"wrote {FLAGS.out}: {count:,} parameters")
