"""The `python -m encoder.ablate` command; the study is encoder/studies/ablation.py."""
from absl import app

from encoder.studies import ablation

if __name__ == "__main__":
    app.run(ablation.main)
