"""`python -m encoder.retrieval.mine`: the `mine` command (encoder/commands/mine.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("mine")  # noqa: E701,E702
