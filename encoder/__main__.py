"""`python -m encoder COMMAND [flags]`: the front door to every command (encoder/commands/)."""
from encoder.commands import cli; cli()  # noqa: E702
