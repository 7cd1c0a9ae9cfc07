"""`python -m encoder export`: a checkpoint as a HuggingFace
folder; the job is encoder/jobs/export.py."""
from absl import flags, logging

from encoder import errors
from encoder.jobs import export
from encoder.commands.one_line import one_line_errors

flags.DEFINE_string("workdir", None, "a workdir of this codebase, a params folder or hf:DIR",
                    required=True)
flags.DEFINE_string("out", None, "the HuggingFace folder to write (new, empty, or a "
                    "previous export holding only what it wrote, which is replaced)", required=True)
flags.DEFINE_enum("format", "transformers", export.FORMATS, "what to write")
flags.DEFINE_string("family", "", "HF family (bert, roberta, albert, electra, roformer, "
                    "modernbert, deberta); empty: the one that computes the model exactly")
flags.DEFINE_string("pooling", "", "--format=sentence-transformers: the Pooling module's rule "
                    "(cls, mean, max, cls_tanh, cls_gelu; empty: a fine-tuning run's own, else "
                    "the source's sentence-transformers modules, else the run config's)")
FLAGS = flags.FLAGS


@one_line_errors(name="export")
def main(argv):
    if len(argv) > 1:
        raise errors.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO
    result = export.export(FLAGS.workdir, FLAGS.out, FLAGS.format, FLAGS.family, FLAGS.pooling)
    pooled = (f", pooling {result['pooling']}" + (f" ({result['pooling_from']})"
                                                  if result["pooling_from"] else "")
              if result["pooling"] else "")
    print(f"wrote {', '.join(result['folders'])}: {result['architecture']} "
          f"(family {result['family']}, head {result['kind']}{pooled})")
    if result.get("pooler"):
        print(f"pooler: {result['pooler']}")
