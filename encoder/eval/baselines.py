"""`python -m encoder.eval.baselines`: now `encoder baselines` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("baselines")  # noqa: E701,E702
