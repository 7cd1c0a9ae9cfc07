"""Benchmarks, one file each, outside the library: `python -m encoder bench --mode=NAME`
runs benchmarks/NAME.py's run(). They print JSON lines and are never asserted in tests."""
