"""The output directory of a diagnostic: checked before any work, claimed (its record written) before the first
file, so that a diagnostic never writes into a directory holding other files (see
:func:`mtdnn.fileio.check_output_dir`)."""

from __future__ import annotations

from pathlib import Path

from ...fileio import check_output_dir, claim_output_dir


def is_diagnose_dir(directory: Path) -> bool:
    """Whether ``directory`` holds a diagnostic's outputs written before output directories had a record file:
    ``diagnose-*.json`` files, or only the training runs of an interrupted partial-input baseline."""
    # keeps torch out of import time
    from ...training.runs import is_run_dir

    if any(directory.glob("diagnose-*.json")):
        return True
    entries = list(directory.iterdir())
    return bool(entries) and all(e.is_dir() and is_run_dir(e) for e in entries)


def check_diagnose_dir(path: str | Path, flag: str = "--output-dir") -> Path:
    """Refuse a directory that is not new, empty or a diagnose output directory, before any work.

    Raises:
        UserError: naming ``flag``, the directory and what it holds.
    """
    return check_output_dir(path, flag, "diagnose", recognised=is_diagnose_dir)


def claim_diagnose_dir(path: str | Path, flag: str = "--output-dir") -> Path:
    """:func:`check_diagnose_dir`, then create the directory with its record file.

    Raises:
        UserError: as :func:`check_diagnose_dir`, or the directory cannot be written.
    """
    return claim_output_dir(check_diagnose_dir(path, flag), "diagnose")
