"""Per-piece soft targets on the student's side (token-level task types: sequence labelling, extractive QA): which
tasks have them, and the checks, made before anything is written, that the student will see exactly the word pieces
the teachers' outputs belong to (:mod:`mtdnn.distillation.pieces`): the same tokenizer (by fingerprint), and the same
tokenized train split (by pieces digest) or, before the teachers are built, the same ``max_length``.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..modeling.model import load_tokenizer
from ..tasks.tokenized import tokenized_split, tokenizer_fingerprint
from ..tasks.taskdef import TaskDef
from .multitask_run import multitask_export
from .pieces import pieces_digest
from .soft_targets import member_fingerprints


def check_tokenizer(tokenizer, encoder: str, teachers: dict[str, str], where: str) -> None:
    """The student's tokenizer must be the teachers' (per-piece soft targets belong to the teachers' pieces).

    Args:
        encoder: the student's encoder (name or path), for the message.
        teachers: ``{teacher encoder or export: tokenizer fingerprint}``.

    Raises:
        ConfigError: naming the student's encoder and the first teacher whose fingerprint differs, with both
            fingerprints (:func:`mtdnn.tasks.tokenized.tokenizer_fingerprint`).
    """
    mine = tokenizer_fingerprint(tokenizer)
    for teacher, theirs in teachers.items():
        if theirs != mine:
            raise ConfigError(f"{where}: the student's tokenizer ({encoder}, fingerprint {mine}) is not the teachers' "
                              f"({teacher}, fingerprint {theirs}); soft targets of token-level tasks are per word "
                              "piece, so the student must use the teachers' tokenizer (init.encoder pretrained or "
                              "multitask, or an encoder with the same tokenizer)")


def piece_tasks(tasks: list[TaskDef]) -> list[TaskDef]:
    """The tasks whose soft targets are per piece."""
    return [t for t in tasks if t.kind.soft_target_pieces is not None]


def check_student(tokenizer, encoder: str, teacher_dir: Path, tasks: list[TaskDef], data_dir: Path,
                  max_length: int | None, where: str) -> None:
    """Before a student is trained on per-piece soft targets: its tokenizer is each member's (by fingerprint), and
    its tokenized train split is the one the members' outputs were computed on (by pieces digest).

    Args:
        tasks: the student's distill tasks (those without per-piece soft targets are skipped).
        max_length: the student's ``train.max_length`` (None: each task's own).

    Raises:
        ConfigError: another tokenizer (naming both), or other pieces (naming both max lengths).
    """
    for task in piece_tasks(tasks):
        members = member_fingerprints(teacher_dir, task)
        check_tokenizer(tokenizer, encoder, {k: v.get("tokenizer") for k, v in members.items()},
                        f"{where}: field 'init.encoder' (task '{task.name}')")
        split = tokenized_split(task, "train", data_dir, tokenizer, max_length)
        digest = pieces_digest(split)
        for export, stored in members.items():
            if stored.get("pieces") != digest:
                theirs = stored.get("max_length") or task.max_length
                raise ConfigError(f"{where}: field 'train.max_length': the student's pieces of task '{task.name}' "
                                  f"(max_length {max_length or task.max_length}) are not those the outputs of "
                                  f"{Path(export).parent.parent.name} were computed on (max_length {theirs}, or "
                                  "another doc_stride or task definition); per-piece soft targets need the same "
                                  "pieces: use the teachers' max_length and task definitions")


def check_before_build(tokenizer, encoder: str, run: str | Path, tasks: list[TaskDef], where: str,
                       max_length: int | None = None, teacher_max_length: int | None = None) -> None:
    """With a teacher spec (teachers not built yet): the student's tokenizer is the one the members will have, the
    multi-task run's (members are fine-tuned from its export), and its max length theirs.

    Args:
        max_length: the student's ``train.max_length``; teacher_max_length: the teacher spec's
            ``finetune.max_length`` (None: each task's own).

    Raises:
        ConfigError: as :func:`check_tokenizer`, or the two max lengths differ for a task (naming both).
    """
    if not piece_tasks(tasks):
        return
    names = ", ".join(t.name for t in piece_tasks(tasks))
    teacher = multitask_export(run, f"{where}: field 'from_run'") / "encoder"
    check_tokenizer(tokenizer, encoder, {str(teacher): tokenizer_fingerprint(load_tokenizer(str(teacher)))},
                    f"{where}: field 'init.encoder' (task(s) {names})")
    for task in piece_tasks(tasks):
        mine, theirs = max_length or task.max_length, teacher_max_length or task.max_length
        if mine != theirs:
            raise ConfigError(f"{where}: field 'train.max_length': task '{task.name}' would be cut into pieces of "
                              f"max_length {mine} by the student and {theirs} by the teachers (finetune.max_length); "
                              "per-piece soft targets need the same pieces")
