"""Per-piece soft targets of the token-level task types (sequence labelling, extractive QA): what a teacher
member's cache holds for them, how a student batch gets them, the tokenizer check, and what the teacher report
reads from them.

A type with ``soft_target_pieces`` (:class:`mtdnn.tasks.types.SoftTargetPieces`) has its soft targets per word
piece. A member's outputs over a split are one row per row of the tokenized split (a sentence; a QA window, whose
id ``<question id>#<window>`` is stable), each ``(pieces, width)`` float32 over the row's real pieces (tag logits;
start and end logits), with the row's label mask (the type's ``mask``: 1 on the first piece of each word; on every
piece of a window). The cache (:mod:`mtdnn.distillation.soft_targets`) stores them flattened with the piece count,
plus a digest of the split's pieces (ids and input ids): a soft target belongs to one piece, so the student must
see exactly the teachers' pieces (same tokenizer, ``max_length``, ``doc_stride`` and data), which
:func:`check_student` verifies before anything is written.

In a student batch, each row's ``(members, pieces, width)`` is placed at the row's real positions
(``attention_mask``, whatever the padding side), giving ``teacher_logits`` ``(batch, members, seq_len, width)`` with
:data:`MASKED` at padding: q is 0 there for a distribution over pieces (span), and a tag distribution at a piece
without a label is ignored by the loss (:func:`mtdnn.modeling.token_heads.token_distillation_loss`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..tasks.data import TokenizedSplit
    from ..tasks.taskdef import TaskDef

MASKED = -1e4  # the logit of padding positions (as mtdnn.modeling.token_heads.MASKED)


@dataclass
class PieceOutputs:
    """One member's per-piece outputs over a split, in the split's row order.

    Attributes:
        rows: per row, ``(pieces, width)`` float32 logits over the row's real pieces.
        masks: per row, the label mask (``pieces`` ints, 1 where the soft loss reads the piece).
        pieces: :func:`pieces_digest` of the split the outputs were computed on.
    """

    rows: list[np.ndarray]
    masks: list[list[int]]
    pieces: str


def pieces_digest(split: TokenizedSplit) -> str:
    """A hash of a tokenized split's row ids and input ids: equal digests, equal pieces row by row."""
    h = hashlib.sha256()
    for row_id, ids in zip(split.ids, split.input_ids):
        h.update(str(row_id).encode() + b"\0")
        h.update(np.asarray(ids, dtype=np.int64).tobytes())
    return h.hexdigest()[:24]


@torch.inference_mode()
def piece_outputs(model, task: TaskDef, split: TokenizedSplit, pad_token_id: int, batch_size: int = 64,
                  device: str = "cpu") -> PieceOutputs:
    """Run a model (eval mode) over a split, batched as dev evaluation is, keeping each row's real pieces.

    Returns:
        :class:`PieceOutputs`: per row ``(pieces, width)`` float32 head outputs, read at the row's
        ``attention_mask`` positions (right or left padding alike), the type's label masks and the pieces digest.
    """
    from ..tasks.data import collate
    from ..tasks.schedule import EvalBatchSampler

    rows: list = [None] * len(split)
    for keys in EvalBatchSampler(split.lengths, batch_size):
        batch = collate([split[k] for k in keys], task, pad_token_id, padding_side=split.padding_side)
        types = batch.get("token_type_ids")
        out = model(task.name, batch["input_ids"].to(device), batch["attention_mask"].to(device),
                    None if types is None else types.to(device)).float().cpu()
        real = batch["attention_mask"].bool()
        for r, i in enumerate(batch["idx"].tolist()):
            rows[i] = out[r][real[r]].numpy()
    return PieceOutputs(rows, task.task_type.soft_target_pieces.mask(split), pieces_digest(split))


class PieceBatchTargets:
    """The members' per-piece outputs of a split's rows (aligned to the rows), placed into each batch.

    Args:
        rows: per row of the split, ``(members, pieces, width)`` float32.
    """

    def __init__(self, rows: list[torch.Tensor]):
        self.rows = rows

    def for_batch(self, batch: dict) -> torch.Tensor:
        """``(batch, members, seq_len, width)``: row ``batch["idx"][r]``'s outputs at the real positions of
        ``batch["attention_mask"][r]``, :data:`MASKED` elsewhere.

        Raises:
            RuntimeError: a row's piece count differs from its cached outputs' (never after :func:`check_student`).
        """
        real = batch["attention_mask"].bool()
        members, _, width = self.rows[0].shape
        out = torch.full((real.shape[0], members, real.shape[1], width), MASKED)
        for r, i in enumerate(batch["idx"].tolist()):
            row = self.rows[i]
            if row.shape[1] != int(real[r].sum()):
                raise RuntimeError(f"row {i} of task '{batch['task']}' has {int(real[r].sum())} pieces, its cached "
                                   f"teacher outputs {row.shape[1]}")
            out[r][:, real[r]] = row
        return out


# ---------------------------------------------------------------------------------------- the student's checks


def member_fingerprints(teacher_dir: Path, task: TaskDef) -> dict[str, dict]:
    """``{member export: fingerprint of its cached train outputs}`` (members without a cache are left out; reading
    their outputs fails later with its own error)."""
    from .soft_targets import logits_dir, member_dir, read_fingerprint, read_manifest

    found = {}
    for member in read_manifest(teacher_dir)["tasks"].get(task.name, {}).get("members", []):
        stored = read_fingerprint(logits_dir(teacher_dir, task.name, member["member"], "train"))
        if stored is not None:
            found[str(member_dir(teacher_dir, task.name, member["member"]) / "export" / "encoder")] = stored
    return found


def check_tokenizer(tokenizer, encoder: str, teachers: dict[str, str], where: str) -> None:
    """The student's tokenizer must be the teachers' (per-piece soft targets belong to the teachers' pieces).

    Args:
        encoder: the student's encoder (name or path), for the message.
        teachers: ``{teacher encoder or export: tokenizer fingerprint}``.

    Raises:
        ConfigError: naming the student's encoder and the first teacher whose fingerprint differs, with both
            fingerprints (:func:`mtdnn.tasks.data.tokenizer_fingerprint`).
    """
    from ..tasks.data import tokenizer_fingerprint

    mine = tokenizer_fingerprint(tokenizer)
    for teacher, theirs in teachers.items():
        if theirs != mine:
            raise ConfigError(f"{where}: the student's tokenizer ({encoder}, fingerprint {mine}) is not the teachers' "
                              f"({teacher}, fingerprint {theirs}); soft targets of token-level tasks are per word "
                              "piece, so the student must use the teachers' tokenizer (init.encoder pretrained or "
                              "multitask, or an encoder with the same tokenizer)")


def piece_tasks(tasks: list[TaskDef]) -> list[TaskDef]:
    """The tasks whose soft targets are per piece."""
    return [t for t in tasks if t.task_type.soft_target_pieces is not None]


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
    from ..tasks.data import tokenized_split

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
    from ..modeling.model import load_tokenizer
    from ..tasks.data import tokenizer_fingerprint
    from .teachers import multitask_export

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


# ------------------------------------------------------------------------------------------- the teacher report


def ensemble_log_probabilities(teacher_logits: torch.Tensor, over: str, real: torch.Tensor) -> torch.Tensor:
    """``log q``, q = (1/M) sum_m softmax(z_m) (MT-DNN-KD's ensemble, at T = 1): ``(batch, members, seq_len, width)``
    -> ``(batch, seq_len, width)``, the softmax over the classes (``over="classes"``) or over the pieces
    (``"pieces"``); padding positions (``real`` ``(batch, seq_len)`` False) hold :data:`MASKED`."""
    q = torch.softmax(teacher_logits.float(), dim=-1 if over == "classes" else -2).mean(dim=1)
    return torch.log(q.clamp(min=1e-30)).masked_fill(~real.unsqueeze(-1), MASKED)


def report_inputs(teacher_dir: Path, task: TaskDef, split_name: str, data_dir: Path,
                  batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """What the teacher report reads from per-piece soft targets on one split.

    The *units* are the soft-target distributions with a gold class: each labelled piece's tag distribution
    (``over="classes"``), or each window's start and end distributions over its pieces, padded with
    :data:`MASKED` (``"pieces"``); the report's calibration, temperature scaling and disagreement treat them as
    classification examples. The ensemble's scores are the task's own metrics (entity F1, SQuAD EM/F1) of
    ``log q`` (:func:`ensemble_log_probabilities`).

    Returns:
        ``(units (u, members, classes) logits, gold (u,) int64, ensemble scores {metric: value})``.

    Raises:
        CheckpointError: see :func:`mtdnn.distillation.soft_targets.teacher_outputs`.
    """
    from ..modeling.metrics import attach_split, build_metrics, compute_metrics, update_metrics
    from ..modeling.model import load_tokenizer
    from ..tasks.data import collate, tokenized_split
    from .soft_targets import teacher_outputs

    from ..errors import CheckpointError

    members = member_fingerprints(teacher_dir, task)
    if not members:
        raise CheckpointError(f"{Path(teacher_dir) / task.name / 'logits'}: no cached teacher outputs of task "
                              f"'{task.name}'; build them with python -m mtdnn.teachers")
    export, fingerprint = next(iter(members.items()))
    tokenizer = load_tokenizer(export)  # the members' tokenizer, and their max_length: their pieces
    split = tokenized_split(task, split_name, data_dir, tokenizer, fingerprint.get("max_length"))
    rows = PieceBatchTargets([torch.from_numpy(r) for r in
                              teacher_outputs(teacher_dir, task, split_name, data_dir, split.ids, rows=split)])
    mask = PieceBatchTargets([torch.tensor(m, dtype=torch.float32).view(1, -1, 1)
                              for m in task.task_type.soft_target_pieces.mask(split)])
    over = task.task_type.soft_target_pieces.over
    metrics = attach_split(build_metrics(task), split)
    units, gold = [], []
    for start in range(0, len(split), batch_size):
        batch = collate([split[i] for i in range(start, min(start + batch_size, len(split)))], task,
                        tokenizer.pad_token_id or 0, padding_side=split.padding_side)
        z, real = rows.for_batch(batch), batch["attention_mask"].bool()
        update_metrics(metrics, task.type, ensemble_log_probabilities(z, over, real), batch["labels"], batch["weight"])
        if over == "classes":
            keep = (mask.for_batch(batch)[:, 0, :, 0] == 1) & (batch["labels"] >= 0)
            units.append(z.transpose(1, 2)[keep])  # (pieces, members, classes)
            gold.append(batch["labels"][keep])
        else:
            units += [z[..., c] for c in range(z.shape[-1])]  # (windows, members, seq_len) per column
            gold += [batch["labels"][:, c] for c in range(z.shape[-1])]
    if over == "pieces":
        longest = max(u.shape[-1] for u in units)
        units = [torch.nn.functional.pad(u, (0, longest - u.shape[-1]), value=MASKED) for u in units]
    return torch.cat(units), torch.cat(gold), compute_metrics(metrics)
