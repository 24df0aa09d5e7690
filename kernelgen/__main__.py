"""``python -m kernelgen`` runs the CLI."""

from kernelgen.cli import run

run()
