"""The `python -m encoder.interop.export` command: its flags; the job is encoder/jobs/export.py."""
from absl import app, flags

from encoder import errors
from encoder.jobs import export

if __name__ == "__main__":
    flags.DEFINE_string("workdir", None, "a workdir of this codebase, a params folder or hf:DIR",
                        required=True)
    flags.DEFINE_string("out", None, "the HuggingFace folder to write (new, empty, or a "
                        "previous export holding only what it wrote, which is replaced)", required=True)
    flags.DEFINE_enum("format", "transformers", export.FORMATS, "what to write")
    flags.DEFINE_string("family", "", "HF family (bert, roberta, albert, electra, roformer, "
                        "modernbert, deberta); empty: the one that computes the model exactly")
    app.run(export.main, flags_parser=errors.parse_flags)
