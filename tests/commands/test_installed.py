"""What `pip install .` puts in place holds every module a command imports: `encoder bench`
imports the benchmarks (a package beside the library, listed in pyproject's packages.find),
so it runs from any directory, not only from a checkout."""
import os
import shutil
import subprocess
import sys
import zipfile

from helpers import ROOT, child_env

PACKAGED = ("encoder", "benchmarks")  # what the wheel is built from, beside pyproject's files


def _wheel_of_the_project(tmp_path) -> str:
    """The project's wheel, built (no dependencies, no network) from a copy of its sources,
    unpacked into a folder that stands in for site-packages."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "requirements.txt"):
        shutil.copy(os.path.join(ROOT, name), src)
    for name in PACKAGED:
        shutil.copytree(os.path.join(ROOT, name), src / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                            "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel, = (tmp_path / "dist").iterdir()
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return str(site)


def test_bench_runs_from_any_directory_once_installed(tmp_path):
    site = _wheel_of_the_project(tmp_path)
    assert os.path.isfile(os.path.join(site, "benchmarks", "step.py"))
    elsewhere = tmp_path / "elsewhere"  # no checkout here: only the installed copy is found
    elsewhere.mkdir()
    env = child_env(PYTHONPATH=site)
    p = subprocess.run([sys.executable, "-m", "encoder", "bench", "--helpshort"], cwd=elsewhere,
                       env=env, capture_output=True, text=True, timeout=300)
    # absl's --helpshort exits 1 after printing; a failed import would print no flags
    assert "--mode" in p.stdout and "--batch_size" in p.stdout, p.stderr[-2000:]
    where = subprocess.run([sys.executable, "-c", "import benchmarks; print(benchmarks.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert where.stdout.strip() == os.path.join(site, "benchmarks", "__init__.py")
