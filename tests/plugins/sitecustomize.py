"""Loaded by every Python process whose ``PYTHONPATH`` holds ``tests/plugins`` (the tests' subprocesses, DDP ranks
included): installs the test-only callbacks of :mod:`mtdnn_test_plugin` when their variables are set."""

import os

if os.environ.get("MTDNN_FAULT_AT_STEP") or os.environ.get("MTDNN_TRACE_DIR"):
    import mtdnn_test_plugin

    mtdnn_test_plugin.install()
