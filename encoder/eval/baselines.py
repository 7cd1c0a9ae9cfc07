"""`python -m encoder.eval.baselines`: the `baselines` command (encoder/commands/baselines.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("baselines")  # noqa: E701,E702
