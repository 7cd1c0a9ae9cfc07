"""`python -m encoder.main`: now `encoder run` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("run")  # noqa: E701,E702
