"""`python -m encoder.merge`: now `encoder merge` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("merge")  # noqa: E701,E702
