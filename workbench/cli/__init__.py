"""The `workbench` command: `parser` (its options, `main`), `commands` (the subcommands'
bodies; `explain` and `compare` theirs), `exits` (how it ends when it does not finish), `demo`
(the hand-built micro model it falls back to). Imports no torch: `--help` and
bad input answer in about a second."""

from workbench.cli.parser import build_parser, main

__all__ = ["build_parser", "main"]
