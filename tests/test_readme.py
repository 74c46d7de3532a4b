"""The README as a new user follows it, and every config chain the configs document.

README blocks marked with a `<!-- quick -->` line just before their fence (each takes under a
minute) run in a fresh `bash` after the README's own set-up step (activating .venv), in a copy of
the repository so nothing is written into it. Every config file's `# Run:` line is parsed by
`scripts/fit.py fit ... --print_config`, and an overlay given alone is refused."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
QUICK = "<!-- quick -->"
ACTIVATE = "source .venv/bin/activate"
COPIED = ("lightning_sched", "tasks", "callbacks", "scripts", "configs", "checkpoints", "pyproject.toml")


def quick_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block whose opening fence follows a QUICK line."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != QUICK:
            continue
        fence = lines[i + 1] if i + 1 < len(lines) else ""
        assert fence.startswith("```"), f"README line {i + 1}: {QUICK} must come right before a fenced block"
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        blocks.append((fence[3:].strip(), "\n".join(lines[i + 2:end])))
    return blocks


def test_quick_blocks_are_found_and_a_misplaced_marker_is_an_error():
    text = f"x\n{QUICK}\n```bash\necho hi\n```\n```bash\nnot quick\n```\n{QUICK}\n```python\nprint(1)\n```\n"
    assert quick_blocks(text) == [("bash", "echo hi"), ("python", "print(1)")]
    with pytest.raises(AssertionError, match="must come right before"):
        quick_blocks(f"{QUICK}\ntext\n```bash\necho\n```\n")


def test_readme_says_to_activate_the_venv_and_is_short():
    text = README.read_text()
    assert re.search(r"^```bash\n" + re.escape(ACTIVATE) + r"\n```$", text, re.M), "README must show the activation"
    assert len(text.splitlines()) < 200


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory) -> Path:
    """The repository's code, configs and checkpoints in a temporary folder, with this checkout's .venv."""
    venv = ROOT / ".venv"
    if not (venv / "bin" / "activate").exists():
        pytest.skip("no .venv in the checkout (make setup creates it)")
    copy = tmp_path_factory.mktemp("readme") / "repo"
    copy.mkdir()
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, copy / name)
    (copy / "README.md").write_text(README.read_text())
    (copy / ".venv").symlink_to(venv)
    return copy


QUICK_BLOCKS = quick_blocks(README.read_text())


@pytest.mark.parametrize("language,code", QUICK_BLOCKS, ids=[f"block{i}" for i in range(len(QUICK_BLOCKS))])
def test_readme_quick_block_runs_after_the_readme_setup(repo_copy, language, code):
    assert language in ("bash", "python"), f"quick blocks are bash or python, got {language!r}"
    body = code if language == "bash" else f"python - <<'README_PYTHON'\n{code}\nREADME_PYTHON"
    script = f"set -euo pipefail\ncd {shlex.quote(str(repo_copy))}\n{ACTIVATE}\n{body}\n"
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "VIRTUAL_ENV", "PYTHONPATH")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"README block failed:\n{code}\n--- stdout\n{proc.stdout[-3000:]}\n" \
                                 f"--- stderr\n{proc.stderr[-3000:]}"


def documented_chains() -> dict[str, list[str]]:
    """Each config file (bases and overlays) with the --config chain of its `# Run:` line."""
    chains = {}
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        name = str(path.relative_to(ROOT))
        run = [line for line in path.read_text().splitlines() if line.startswith("# Run: ")]
        if not run:  # a single file, used alone
            chains[name] = [name]
            continue
        args = shlex.split(run[0][len("# Run: "):])
        chains[name] = [args[i + 1] for i, arg in enumerate(args) if arg in ("--config", "-c")]
    return chains


# One process parses every chain (fit.main per chain), so the parser's imports are paid once.
PRINT_CONFIGS = """
import contextlib, io, json, sys
sys.path.insert(0, "scripts")
import fit
results = {}
for name, chain in json.loads(sys.argv[1]).items():
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            fit.main(["fit", *[a for c in chain for a in ("--config", c)], "--print_config"])
        except SystemExit as stop:
            code = stop.code or 0
    results[name] = {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()[-500:]}
print(json.dumps(results))
"""


def print_configs(chains: dict[str, list[str]]) -> dict[str, dict]:
    import json

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", PRINT_CONFIGS, json.dumps(chains)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_documented_config_chain_parses_and_an_overlay_alone_is_refused():
    chains = documented_chains()
    overlays = {name: chain for name, chain in chains.items() if len(chain) > 1}
    assert "configs/masked_slowdown_loads.yaml" in overlays and "configs/smoke.yaml" in chains
    for name, chain in chains.items():
        assert chain[-1] == name, f"{name}: its # Run: line must end with the file itself, got {chain}"
    # an overlay names no model.class_path, which is what makes it unusable alone (one is parsed to show it)
    for name in overlays:
        assert "class_path" not in (yaml.safe_load((ROOT / name).read_text()).get("model") or {}), name
    results = print_configs({**chains, "overlay alone": ["configs/masked_slowdown_loads.yaml"]})
    for name in chains:
        result = results[name]
        assert result["code"] == 0, f"{name}: {chains[name]} does not parse:\n{result['stderr']}"
        assert yaml.safe_load(result["stdout"])["model"]["class_path"].startswith("tasks.")
    assert results["overlay alone"]["code"] != 0, "an overlay parses without its base: it would run with defaults"
    assert "configs/masked_slowdown_loads.yaml is an overlay" in results["overlay alone"]["stderr"]
    assert "--config configs/base/loads.yaml --config configs/masked_slowdown_loads.yaml" in \
        results["overlay alone"]["stderr"]
    # the merge keeps the base and applies the overlay
    merged = yaml.safe_load(results["configs/wide_loads_slowdown.yaml"]["stdout"])["model"]["init_args"]
    assert merged["workload"]["load"] == [0.2, 2.0] and merged["workload"]["short_prob"] == [0.8, 0.8]
    assert merged["policy"]["masked"] is True and merged["init_from"] == "checkpoints/reinforce_slowdown.ckpt"


def test_every_overlay_given_alone_is_refused_naming_its_base():
    from callbacks.cli import require_base
    from lightning_sched import ConfigError

    chains = documented_chains()
    overlays = {name: chain for name, chain in chains.items() if len(chain) > 1}
    assert len(overlays) > 20
    cwd = os.getcwd()
    os.chdir(ROOT)  # the # Run: lines name configs from the checkout's root
    try:
        for name, chain in overlays.items():
            with pytest.raises(ConfigError, match=re.escape(" ".join(f"--config {c}" for c in chain))):
                require_base(["fit", "--config", name])
            require_base(["fit", *[a for c in chain for a in ("--config", c)]])  # with its base: accepted
        for name in set(chains) - set(overlays):
            require_base(["fit", f"--config={name}"])  # a base or a config used alone
    finally:
        os.chdir(cwd)
