"""`python -m encoder.data.prepare`, the old name of `encoder prepare`: says so, then runs it."""
if __name__ == "__main__": from encoder.commands import launch; launch("prepare")  # noqa: E701,E702
