"""`python -m gameon ...`: the `gameon` command."""

from gameon.cli import main

main()
