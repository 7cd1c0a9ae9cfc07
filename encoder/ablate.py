"""The `python -m encoder.ablate` command; the study is encoder/studies/ablation.py."""
from absl import app

from encoder.studies import ablation

if __name__ == "__main__":
    from encoder import errors
    app.run(errors.one_line_errors(ablation.main, resumable=True),
            flags_parser=errors.parse_flags)
