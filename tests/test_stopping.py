"""The SIGTERM watchdog's own exit (mtdnn/training/stopping.py): a rank still running its grace period after the
signal exits 143 at once with its message, not with a NameError in a daemon thread (which kept the process alive)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import time
from pathlib import Path
from types import SimpleNamespace
from mtdnn.training.stopping import graceful_stop_connector
connector = graceful_stop_connector(SimpleNamespace(global_rank=0), Path("no-such-dir/last.ckpt"))
connector.arm_watchdog("SIGTERM")
time.sleep(30)
print("still alive")
"""


def test_the_watchdog_exits_143_with_its_message_after_the_grace_period():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MTDNN_SIGTERM_GRACE_S": "0.5"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 143, done.stderr
    assert "still alive" not in done.stdout
    assert "rank 0: still running 0.5 s after SIGTERM" in done.stderr
    assert "no checkpoint was saved yet" in done.stderr
