"""Per-task Hugging Face models in an export: ``export/hf/<task>/``, served by ``transformers`` as is.

A sentence-level task (classification or regression) whose head is, parameter for parameter, the encoder
family's own ``*ForSequenceClassification`` head is written as a standard ``AutoModelForSequenceClassification``
folder: ``config.json`` (``id2label``/``label2id``, ``problem_type`` ``single_label_classification`` or
``regression``), ``model.safetensors`` and the tokenizer, with ``model_max_length`` set to the task's
``max_length``. ``transformers.pipeline("text-classification", model=export/hf/<task>)`` then gives the
toolkit's probabilities (softmax over the logits) or, for regression, its raw score (the pipeline applies no
function when ``problem_type`` is ``regression``).

Whether a head is expressible is decided from the family itself, not from a list of families:

1. the task type must be classification or regression, and the head must read the encoder's pooler
   (``pooling: pooler``); a ``cls`` or ``mean`` pooled head, or a ranking head, has no such counterpart;
2. ``AutoModelForSequenceClassification.from_config`` builds the family's model from the encoder's config; its
   base model must hold exactly the encoder's parameters (same names and shapes), except encoder parameters it
   leaves out (RoBERTa's sequence-classification model drops the pooler and holds the same dense layer in its
   head);
3. the family's head parameters, in order, must have the shapes of the parameters our head computes with, in
   order: the encoder parameters the base model left out, then the head's linear layer (BERT: ``classifier`` =
   our ``out``; RoBERTa: ``classifier.dense``, ``classifier.out_proj`` = the pooler's dense layer and our
   ``out``);
4. with those weights loaded, the family's model must give our head's outputs on a probe batch (random pair
   input with padding, eval mode) to 1e-5: equal shapes alone never pass a head that computes something else.

A task that fails any step is named in the manifest (``mtdnn_export.json``, ``toolkit_only``) with the reason,
and gets no folder: a head is never approximated.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification

from ..modeling.model import MultiTaskModel
from ..tasks.taskdef import TaskDef

HF_DIR = "hf"
PROBE_TOLERANCE = 1e-5
REGRESSION_LABEL = "score"


@dataclass
class Conversion:
    """The outcome for one task: a ``transformers`` model with the task's weights, or why there is none."""

    task: str
    model: torch.nn.Module | None = None
    reason: str | None = None


def hf_dir_name(task: str) -> str:
    """The task's folder name under ``hf/``: the name itself, or a safe form with a short digest of it."""
    if re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", task):
        return task
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", task).strip("._") or "task"
    return f"{safe}-{hashlib.sha256(task.encode()).hexdigest()[:8]}"


def hf_config(encoder_config, task: TaskDef):
    """The encoder's config with the task's outputs: ``num_labels``, ``id2label``/``label2id``, ``problem_type``.

    A regression task has one output, labelled ``score``. Where the family's config has ``classifier_dropout``,
    it is set to the head's dropout (it only matters when the model is trained further).
    """
    config = copy.deepcopy(encoder_config)
    shape = task.kind.hf_classifier
    assert shape is not None, f"task '{task.name}': a {task.type} head has no *ForSequenceClassification form"
    names = [REGRESSION_LABEL] if shape.one_score else list(task.labels)
    config.num_labels = len(names)
    config.id2label = dict(enumerate(names))
    config.label2id = {name: i for i, name in enumerate(names)}
    config.problem_type = shape.problem_type
    if hasattr(config, "classifier_dropout"):
        config.classifier_dropout = task.head.dropout
    return config


def convert_task(model: MultiTaskModel, task: TaskDef) -> Conversion:
    """``task``'s head on ``model``'s encoder as the family's ``*ForSequenceClassification``, or the reason not.

    See the module docstring for the four checks. ``model`` is left in the training mode it had.
    Returns a :class:`Conversion` with ``model`` (eval mode, float32, CPU) or ``reason``.
    """

    if task.kind.hf_classifier is None:
        return Conversion(task.name, reason=f"{task.type} head: {task.kind.no_hf_model}")
    if task.head_type != "linear":
        return Conversion(task.name, reason=f"head type '{task.head_type}': not a linear layer on the pooled output, "
                                            "which is all a *ForSequenceClassification head is")
    if task.head.pooling != "pooler":
        pooled = {"cls": "the first token", "last": "the last token"}.get(task.head.pooling, "the mean of tokens")
        return Conversion(task.name, reason=f"pooling '{task.head.pooling}': a linear layer on {pooled}, not on the "
                                            "encoder's pooled output as *ForSequenceClassification heads read it")
    encoder = model.encoder
    config = hf_config(encoder.config, task)
    try:
        hf = AutoModelForSequenceClassification.from_config(config)
    except Exception as err:  # noqa: BLE001 - unknown or custom families raise many types; never fail the export
        return Conversion(task.name, reason=f"no AutoModelForSequenceClassification for model type "
                                            f"'{encoder.config.model_type}' ({err})")
    family = type(hf).__name__
    prefix = hf.base_model_prefix + "."
    ours = {k: v for k, v in encoder.state_dict().items()}
    theirs = hf.state_dict()
    base = {k[len(prefix):]: v for k, v in theirs.items() if k.startswith(prefix)}
    mismatched = [k for k, v in base.items() if k not in ours or ours[k].shape != v.shape]
    if mismatched:
        return Conversion(task.name, reason=f"{family}'s base model differs from the encoder (e.g. parameter "
                                            f"'{mismatched[0]}')")
    head = model.heads[task.name]
    ours_head = [(k, v) for k, v in ours.items() if k not in base]  # e.g. RoBERTa's pooler, held by its head
    ours_head += [(f"<head>.{k}", v) for k, v in head.state_dict().items()]
    theirs_head = [(k, v) for k, v in theirs.items() if not k.startswith(prefix)]
    shapes = lambda items: [tuple(v.shape) for _, v in items]  # noqa: E731
    if shapes(ours_head) != shapes(theirs_head):
        return Conversion(task.name, reason=f"{family}'s head has other parameters than this head "
                                            f"({', '.join(k for k, _ in theirs_head)} with shapes "
                                            f"{shapes(theirs_head)} vs {', '.join(k for k, _ in ours_head)} with "
                                            f"shapes {shapes(ours_head)})")
    state = {prefix + k: ours[k] for k in base}
    state.update({name: v for (name, _), (_, v) in zip(theirs_head, ours_head)})
    hf.load_state_dict(state, strict=True)
    hf.eval()
    difference = _probe_difference(model, task, hf)
    if not difference <= PROBE_TOLERANCE:
        return Conversion(task.name, reason=f"{family} with this head's weights computes other outputs (max "
                                            f"difference {difference:.3g} on a probe batch): its head is not this "
                                            "head")
    return Conversion(task.name, model=hf)


@torch.no_grad()
def _probe_difference(model: MultiTaskModel, task: TaskDef, hf) -> float:
    """Largest absolute difference between ``model``'s ``task`` outputs and ``hf``'s logits on a probe batch.

    The probe: 3 rows of 12 random token ids, the second row padded after 7 tokens, two segments where the
    encoder has token types. Both models in eval mode (no dropout); ``model``'s mode is restored.
    """
    generator = torch.Generator().manual_seed(0)
    vocab = int(model.encoder.config.vocab_size)
    input_ids = torch.randint(5, vocab, (3, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 7:] = 0
    type_vocab = int(getattr(model.encoder.config, "type_vocab_size", 0) or 0)
    token_type_ids = None
    if type_vocab > 1:
        token_type_ids = torch.zeros_like(input_ids)
        token_type_ids[:, 6:] = 1
    kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
    training = model.training
    model.eval()
    try:
        # MultiTaskModel.forward, calling the encoder's forward itself: an encoder compiled in place
        # (--compile) is not compiled again here.
        out = model.encoder.forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        ours = model.heads[task.name](out.last_hidden_state, attention_mask, getattr(out, "pooler_output", None))
    finally:
        model.train(training)
    theirs = hf(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
    if task.kind.hf_classifier.one_score:
        theirs = theirs.squeeze(-1)
    if theirs.shape != ours.shape:
        return float("inf")
    return float((ours.float() - theirs.float()).abs().max())


def write_hf_models(model: MultiTaskModel, tokenizer, tasks: dict[str, TaskDef], out_dir: Path
                    ) -> tuple[dict[str, str], dict[str, str]]:
    """Write ``out_dir/hf/<task>/`` for every expressible task; ``({task: folder}, {task: reason})``.

    The folders are relative to ``out_dir``. Each holds the model (``save_pretrained``) and the tokenizer with
    ``model_max_length`` = the task's ``max_length``, so that ``truncation=True`` in the pipeline truncates as
    the toolkit does.
    """
    folders, toolkit_only = {}, {}
    for name, task in tasks.items():
        conversion = convert_task(model, task)
        if conversion.model is None:
            toolkit_only[name] = conversion.reason
            continue
        folder = Path(HF_DIR) / hf_dir_name(name)
        conversion.model.save_pretrained(out_dir / folder)
        task_tokenizer = copy.deepcopy(tokenizer)
        task_tokenizer.model_max_length = task.max_length
        task_tokenizer.save_pretrained(out_dir / folder)
        folders[name] = folder.as_posix()
    return folders, toolkit_only
