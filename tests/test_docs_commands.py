"""The commands the documentation shows still run as written: every `python scripts/...` command of
README.md, docs/*.md, configs/README.md and checkpoints/README.md parses with its script's own flags
(argparse's checks: unknown flags, choices, types; nothing runs), and one that writes over a file of
the repository says --overwrite. fit.py's commands go through LightningCLI's --print_config: their
config files and keys exist."""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "configs" / "README.md",
        ROOT / "checkpoints" / "README.md"]
COMMAND = re.compile(r"python (scripts/[\w/]+\.py)\b([^`#\n]*)")
OUTPUTS = ("--out", "--figure", "--write", "--save_jobsets", "--save")
# the repository's files (a command writing over one must say --overwrite), not what a checkout's runs made
TRACKED = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
# a word that stands for a value the reader supplies (SITE, CKPT, X.ckpt, <site>, 0.3 ... 1.9)
PLACEHOLDER = re.compile(r"^([A-Z][A-Z0-9_]*(\.ckpt)?|<.*>|.*\.\.\..*|.*\$.*)$")


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(where, script, its arguments) of each command: a fenced block's lines (joined at trailing
    backslashes) and inline code spans (which may wrap over lines)."""
    found = []
    for path in DOCS:
        text = path.read_text()
        fenced = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
        spans = re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        pieces = [line for block in fenced for line in block.replace("\\\n", " ").splitlines()]
        pieces += [span.replace("\n", " ") for span in spans]
        for piece in pieces:
            for script, rest in COMMAND.findall(piece):
                rest = re.split(r"\s[|<>&]|;", rest)[0]  # a pipe, a redirection, & or a next command ends it
                rest = re.sub(r"\[(--[^\[\]]*)\]", r"\1", rest)  # [--an optional flag]
                try:
                    words = shlex.split(rest)
                except ValueError:  # an unbalanced quote: prose, not a command
                    continue
                found.append((f"{path.relative_to(ROOT)}: python {script}{rest[:60]}", script, words))
    return found


COMMANDS = documented_commands()


class Parsed(Exception):
    """Raised by the patched parse_args once argparse accepted the arguments."""


def parse(script: str, words: list[str], monkeypatch) -> str | None:
    """None when `script` accepts `words`, else argparse's (or the script's) one-line refusal."""
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        original(self, args, namespace)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "argv", [script, *words])
    for folder in (ROOT / "scripts", ROOT / "scripts" / "experiments"):
        monkeypatch.syspath_prepend(str(folder))
    spec = importlib.util.spec_from_file_location(f"documented_{Path(script).stem}", ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            module.main()
    except Parsed:
        return None
    except SystemExit:
        return stderr.getvalue().strip() or "exit"
    except ValueError as error:  # a ConfigError raised before parsing ends
        return str(error)
    return "main() returned without parsing its arguments"


def test_the_documents_show_commands_of_every_kind():
    scripts = {script for _, script, _ in COMMANDS}
    assert len(COMMANDS) > 200 and {"scripts/fit.py", "scripts/evaluate.py", "scripts/figures.py"} <= scripts


@pytest.mark.parametrize("where, script, words", [c for c in COMMANDS if c[1] != "scripts/fit.py"],
                         ids=[c[0][:90] for c in COMMANDS if c[1] != "scripts/fit.py"])
def test_a_documented_command_parses_and_overwrites_only_when_it_says_so(where, script, words, monkeypatch):
    assert (ROOT / script).is_file(), where
    refusal = parse(script, words, monkeypatch)
    # prose that names a flag and leaves its value or the other flags to the reader
    fragment = refusal and re.search(r"arguments are required|expected (at least )?one argument", refusal)
    elsewhere = refusal and "CUDA is not available" in refusal  # a command for a GPU machine
    if refusal and not fragment and not elsewhere and not any(PLACEHOLDER.match(word) for word in words):
        pytest.fail(f"{where}: {refusal}")
    split = [part for word in words for part in (word.split("=", 1) if word.startswith("--") else [word])]
    for flag, value in zip(split, split[1:]):
        if flag in OUTPUTS and value in TRACKED:  # a reader's own runs/ outputs are theirs to replace
            assert "--overwrite" in words, f"{where}: {flag} {value} exists; the command needs --overwrite"


FIT = [c for c in COMMANDS if c[1] == "scripts/fit.py" and not any(PLACEHOLDER.match(w) for w in c[2])]


@pytest.mark.parametrize("where, script, words", FIT, ids=[c[0][:90] for c in FIT])
def test_a_documented_fit_command_has_configs_and_keys_that_exist(where, script, words, fit_main, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the documents' paths are from the repository's root
    with pytest.raises(SystemExit) as stopped:  # LightningCLI prints the whole config and stops
        fit_main([*words, "--print_config"])
    assert stopped.value.code in (0, None), f"{where}: {capsys.readouterr().err.strip()[-500:]}"
