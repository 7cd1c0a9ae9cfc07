"""`python -m encoder.suite`, the old name of `encoder suite`: says so, then runs it."""
if __name__ == "__main__": from encoder.commands import launch; launch("suite")  # noqa: E701,E702
