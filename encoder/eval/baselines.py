"""`python -m encoder.eval.baselines`, the old name of `encoder baselines`: says so, then runs it."""
if __name__ == "__main__": from encoder.commands import launch; launch("baselines")  # noqa: E701,E702
