"""`python -m encoder.main`: the `run` command (encoder/commands/run.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("run")  # noqa: E701,E702
