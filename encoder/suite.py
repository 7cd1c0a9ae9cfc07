"""`python -m encoder.suite`: now `encoder suite` (says so, then runs it)."""
if __name__ == "__main__": from encoder.commands import launch; launch("suite")  # noqa: E701,E702
