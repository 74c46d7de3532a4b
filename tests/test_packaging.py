"""The installed project: packages under its own name only, the package list in pyproject.toml
matching the tree, and a wheel whose console commands run outside the checkout."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"lightning_sched.tasks": "tasks", "lightning_sched.callbacks": "callbacks",
          "lightning_sched.scripts": "scripts"}
SOURCES = ("pyproject.toml", "README.md", "lightning_sched", "tasks", "callbacks", "scripts")


def test_pyproject_lists_every_package_under_the_project_name():
    tomllib = pytest.importorskip("tomllib")
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    library = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "lightning_sched").rglob("__init__.py")}
    assert set(setup["packages"]) == library | set(MAPPED)
    assert setup["package-dir"] == MAPPED and all((ROOT / d / "__init__.py").is_file() for d in MAPPED.values())


@pytest.mark.slow
def test_the_wheel_installs_and_its_commands_run_outside_the_checkout(tmp_path):
    """Builds the wheel from a copy of the sources (nothing written into the checkout), installs it
    without network or dependencies into a fresh venv that sees this environment's packages, and
    runs lsched-evaluate and a two-iteration lsched-fit from a folder outside the checkout."""
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                         if (ROOT / name).is_dir() else {}))
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("lightning_sched-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"lightning_sched", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "lightning_sched/tasks/reinforce.py" in names and "lightning_sched/deeprm/native_step.c" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # the dependencies (torch, lightning, ...) from this environment, as a plain path: its editable
    # install of the checkout is not activated there
    (Path(site) / "outer_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "WANDB_API_KEY")}
    env.update(OMP_NUM_THREADS="1", HOME=str(work), WANDB_MODE="offline")

    def command(*args):
        proc = subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=work, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, f"{args}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout

    where = subprocess.run([str(python), "-c", "import lightning_sched, importlib.util as u; "
                            "print(lightning_sched.__file__, u.find_spec('tasks'), u.find_spec('callbacks'))"],
                           cwd=work, env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv)) and where.split()[1:] == ["None", "None"]  # nothing top-level but ours
    out = command("lsched-evaluate", "--policy", "sjf", "--jobsets", "2", "--threads", "1")
    assert "sjf " in out and "lower is better" in out
    shutil.copy2(ROOT / "configs" / "smoke.yaml", work / "smoke.yaml")
    out = command("lsched-fit", "fit", "--config", "smoke.yaml", "--trainer.max_steps", "2", "--threads", "1")
    assert "fit done at step 2" in out and "lsched-evaluate --policy runs/smoke/checkpoints/best-2.ckpt" in out
    assert (work / "runs" / "smoke" / "checkpoints" / "last.ckpt").is_file()
    shutil.copy2(ROOT / "checkpoints" / "queue_bsld.ckpt", work / "queue.ckpt")
    (work / "snapshot.json").write_text('{"now": 100, "capacity": {"processors": 8}, "running": [], "waiting": '
                                        '[{"id": "j1", "submit": 90, "requested_time": 60, "processors": 2}]}')
    out = command("lsched-decide", "--policy", "queue.ckpt", "--snapshot", "snapshot.json")
    assert '"start_now": ["j1"]' in out
