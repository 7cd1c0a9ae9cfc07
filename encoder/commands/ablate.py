"""`python -m encoder ablate`: an ablation study in one command.

The study (plan, runs, comparison) and its flags' meaning: encoder/studies/ablation.py.
"""
from absl import flags
from ml_collections import config_flags

from encoder import errors
from encoder.commands import launcher_flags  # --launcher and its options
from encoder.commands.one_line import one_line_errors

config_flags.DEFINE_config_file("config", None, "the base experiment file[:arg]",
                                lock_config=True)
flags.DEFINE_multi_string("sweep", [], "field=v1,v2,... (repeatable)")
flags.DEFINE_bool("zip", False, "zip the sweeps instead of taking their product")
flags.DEFINE_integer("seeds", 1, "seed indices per variant")
flags.DEFINE_integer("parallel", 1, "runs at once")
flags.DEFINE_bool("equal_flops", False, "equal compute: steps = budget / FLOPs per step")
flags.DEFINE_string("finetune", "", "fine-tuning experiment file[:arg] run on each variant")
flags.DEFINE_string("finetune_data", "", "folder with train.jsonl and dev.jsonl")
flags.DEFINE_multi_string("finetune_set", [], "field=value overrides for fine-tuning, e.g. "
                          "train.learning_rate=1e-3 (repeatable)")
flags.DEFINE_string("suite", "", "run `encoder suite` on each run: a tasks folder, or "
                    "'embedded' for the default suite built from the standard library")
flags.DEFINE_multi_string("suite_arg", [], "an `encoder suite` flag for every suite, e.g. "
                          "--suite_arg=--preset=runlocal (repeatable)")
flags.DEFINE_bool("watch", False, "a watcher beside each run: the suite (--suite's tasks, "
                  "--suite_arg's flags) on each of its checkpoints while it trains, as a run of "
                  "the study (its launcher); curves.png/md from them")
flags.DEFINE_list("wsd_budgets", [], "a WSD study (steps, e.g. 150,300,450): per variant and "
                  "seed one stable run, then for each budget B a decay of "
                  "--wsd_decay_fraction x B steps from its checkpoint at the rest of B")
flags.DEFINE_float("wsd_decay_fraction", 0.2, "a WSD study: the decay's share of each budget")
flags.DEFINE_string("wsd_shape", "linear", "a WSD study: the decay's shape (linear | cosine | "
                    "1-sqrt)")
flags.DEFINE_string("workdir", None, "the study's folder", required=True)
FLAGS = flags.FLAGS


@one_line_errors(resumable=True)
def main(argv):
    if len(argv) > 1:
        raise errors.UsageError(f"unexpected arguments: {argv[1:]}")
    from encoder.studies import ablation
    f = FLAGS
    study = ablation.Study(
        workdir=f.workdir, config=f.config, sweeps=tuple(f.sweep), zipped=f.zip,
        seeds=f.seeds, parallel=f.parallel, equal_flops=f.equal_flops, finetune=f.finetune,
        finetune_data=f.finetune_data, finetune_set=tuple(f.finetune_set), suite=f.suite,
        suite_args=tuple(f.suite_arg), watch=f.watch,
        wsd_budgets=tuple(f.wsd_budgets), wsd_decay_fraction=f.wsd_decay_fraction,
        wsd_shape=f.wsd_shape)
    ablation.run_study(study, launcher_flags.make(f.parallel, job_name="ablate"))
