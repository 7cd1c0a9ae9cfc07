"""`python -m encoder.ablate`: the `ablate` command (encoder/commands/ablate.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("ablate")  # noqa: E701,E702
