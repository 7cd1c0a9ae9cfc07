"""`python -m encoder.eval.probe`: the `probe` command (encoder/commands/probe.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("probe")  # noqa: E701,E702
