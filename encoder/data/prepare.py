"""`python -m encoder.data.prepare`: the `prepare` command (encoder/commands/prepare.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("prepare")  # noqa: E701,E702
