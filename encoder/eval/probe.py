"""The `python -m encoder.eval.probe` command: its flags; the job is encoder/jobs/probe.py."""
from absl import app, flags

from encoder.jobs import probe

if __name__ == "__main__":
    flags.DEFINE_string("init_from", None, "a workdir of this codebase or hf:DIR", required=True)
    flags.DEFINE_list("tasks", None, "task folders (train.jsonl, dev.jsonl)", required=True)
    flags.DEFINE_string("out", None, "where probes.json and probes.png go", required=True)
    flags.DEFINE_bool("random_init", False, "probe the same architecture at random init")
    flags.DEFINE_integer("max_train", 2000, "training examples per task (0: all)")
    flags.DEFINE_integer("max_tokens", 20000, "training words per tagging probe (0: all)")
    flags.DEFINE_integer("max_len", 128, "tokens per input")
    flags.DEFINE_integer("seed", 0, "subsampling, control shuffle and random-init seed")
    from encoder import errors
    app.run(errors.one_line_errors(probe.main), flags_parser=errors.parse_flags)
