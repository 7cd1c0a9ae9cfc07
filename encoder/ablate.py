"""`python -m encoder.ablate`, the old name of `encoder ablate`: says so, then runs it."""
if __name__ == "__main__": from encoder.commands import launch; launch("ablate")  # noqa: E701,E702
