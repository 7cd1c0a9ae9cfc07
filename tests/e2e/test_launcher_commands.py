"""The launchers and the study runner through the real commands (subprocess runs): a dry
run prints the scripts it would submit; a run's command is the main entry point."""
import subprocess
import sys

from encoder.studies import runner
from helpers import ROOT, child_env


def _env():
    return child_env()


def test_main_and_ablate_print_their_scripts_in_a_dry_run(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "encoder", "run", "--config=experiments/pretrain.py:runlocal",
         f"--workdir={tmp_path / 'w'}", "--launcher=slurm", "--slurm_tasks=2",
         "--slurm_partition=debug", "--dry_run", "--config.train.num_steps=3"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=_env())
    assert out.returncode == 0, out.stderr
    assert "(dry run: not submitted)" in out.stdout and "#SBATCH --ntasks=2" in out.stdout
    srun = next(line for line in out.stdout.splitlines() if line.startswith("srun"))
    assert "--config.train.num_steps=3" in srun and "--launcher" not in srun
    assert "--dry_run" not in srun and "--slurm" not in srun
    tpu = subprocess.run(
        [sys.executable, "-m", "encoder", "run", "--config=experiments/pretrain.py:runlocal",
         "--workdir=gs://b/w", "--launcher=tpu_vm", "--tpu=pod", "--zone=z", "--dry_run"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=_env())
    assert tpu.returncode == 0, tpu.stderr
    assert "gcloud compute tpus tpu-vm ssh pod --zone=z --worker=all" in tpu.stdout
    study = subprocess.run(
        [sys.executable, "-m", "encoder", "ablate", "--config=experiments/pretrain.py:runlocal",
         "--sweep=objective=mlm,rtd", f"--workdir={tmp_path / 's'}", "--launcher=slurm",
         "--slurm_time=1:00:00", "--parallel=2", "--dry_run"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=_env())
    assert study.returncode == 0, study.stderr
    assert "#SBATCH --array=0-1%2" in study.stdout and "#SBATCH --time=1:00:00" in study.stdout
    assert "objective=rtd__seed0" in study.stdout
    assert not (tmp_path / "s" / "results.csv").exists()  # nothing ran: no report


def test_a_run_is_the_main_entry_point_on_its_config_file(tmp_path):
    run = runner.make_run("r", str(tmp_path / "r"), {"mode": "nothing", "distributed": {"coordinator_address": ""}})
    runner.prepare(run, log=lambda *_: None)
    cmd = runner.job_command(run)
    assert cmd[1:4] == ["-m", "encoder", "run"]
    assert cmd[4:] == [f"--config={run.workdir}/job_config.py", f"--workdir={run.workdir}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=child_env())
    assert out.returncode != 0 and "Unknown config.mode 'nothing'" in out.stderr
