"""`python -m encoder.eval.probe`: now `encoder probe` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("probe")  # noqa: E701,E702
