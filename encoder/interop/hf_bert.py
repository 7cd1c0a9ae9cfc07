"""The `python -m encoder.interop.hf_bert` command: its flags; the job is encoder/jobs/import_hf.py."""
from absl import app, flags

from encoder.jobs import import_hf

if __name__ == "__main__":
    flags.DEFINE_string("checkpoint", None, "HuggingFace checkpoint folder", required=True)
    flags.DEFINE_string("out", None, "output directory for the orbax checkpoint", required=True)
    from encoder import errors
    app.run(errors.one_line_errors(import_hf.main), flags_parser=errors.parse_flags)
