"""`python -m encoder.suite`: the `suite` command (encoder/commands/suite.py)."""
if __name__ == "__main__": from encoder.commands import launch; launch("suite")  # noqa: E701,E702
