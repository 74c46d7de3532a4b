"""The checkout on sys.path, for the scripts run as files from one (without `pip install -e .`):
imported first by every script of scripts/, through _common or directly by those that must start without torch
(decide.py, squeue_hook.py: an .onnx policy answers in a fraction of a second)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout (installed: the lightning_sched package)
if (ROOT / "lightning_sched").is_dir() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
