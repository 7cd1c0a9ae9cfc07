"""`python -m encoder.merge`: the `merge` command (encoder/commands/merge.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("merge")  # noqa: E701,E702
