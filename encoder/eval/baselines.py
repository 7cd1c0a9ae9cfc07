"""The `python -m encoder.eval.baselines` command: its flags; the job is encoder/tasks/baselines.py."""
from absl import app, flags

from encoder.tasks import baselines, table

if __name__ == "__main__":
    flags.DEFINE_enum("task", table.DEFAULT, table.having("baselines"),
                      "the task type (those with a baseline)")
    flags.DEFINE_string("train", None, "train file", required=True)
    flags.DEFINE_string("dev", None, "dev file", required=True)
    from encoder import errors
    app.run(errors.one_line_errors(baselines.main), flags_parser=errors.parse_flags)
