"""`python -m encoder.bench`: the `bench` command (encoder/commands/bench.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("bench")  # noqa: E701,E702
