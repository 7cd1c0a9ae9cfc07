"""`python -m encoder.data.prepare`: now `encoder prepare` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("prepare")  # noqa: E701,E702
