"""`python -m encoder.bench`: now `encoder bench` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("bench")  # noqa: E701,E702
