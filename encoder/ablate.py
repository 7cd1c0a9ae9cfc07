"""`python -m encoder.ablate`: now `encoder ablate` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("ablate")  # noqa: E701,E702
