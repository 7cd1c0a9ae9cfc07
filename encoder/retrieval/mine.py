"""`python -m encoder.retrieval.mine`: now `encoder mine` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("mine")  # noqa: E701,E702
