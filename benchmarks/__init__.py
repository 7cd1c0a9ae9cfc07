"""Benchmarks, one file each, outside the library: `python -m encoder bench --mode=NAME`
runs benchmarks/NAME.py's run(). They print JSON lines and are never asserted in tests.

The folder is installed with the project (pyproject's packages.find), so `encoder bench`
runs from any directory after `pip install -e .`."""
import os

# The checkout these files sit in: its experiments/ holds the recipes the benchmarks that
# start runs name (a path on the command line is read from the current directory, which
# may be any).
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPERIMENTS = os.path.join(CHECKOUT, "experiments")
