"""`python -m planner.cli ...` runs the `rota` command."""

from planner.cli import main

main()
