"""The scripts' argparse parser, apart from cli.py (which reads checkpoints and traces) so that
scripts/decide.py keeps running without torch."""
from __future__ import annotations

import argparse


class ScriptParser(argparse.ArgumentParser):
    """argparse for the scripts: a bad flag ends in one line naming it (and --help), not the
    usage of every flag."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (--help lists the flags)\n")
