"""Per-task Hugging Face models in an export: ``export/hf/<task>/``, served by ``transformers`` as is.

A task whose head is, parameter for parameter, the encoder family's own task head is written as a standard
folder of that family's model: ``config.json``, ``model.safetensors`` and the tokenizer, with ``model_max_length``
set to the task's ``max_length``. Three forms, each declared by the task type (:class:`mtdnn.tasks.types.HfModel`):

- classification and regression (the linear head on the pooled output): ``AutoModelForSequenceClassification``
  (``id2label``/``label2id``, ``problem_type`` ``single_label_classification`` or ``regression``);
  ``pipeline("text-classification")`` gives the toolkit's probabilities (softmax over the logits) or, for
  regression, its raw score (the pipeline applies no function when ``problem_type`` is ``regression``);
- sequence labelling (the token head): ``AutoModelForTokenClassification`` with the BIO tags as ``id2label``;
  ``pipeline("token-classification", aggregation_strategy="first")`` tags each word by its first piece, as the
  toolkit does, and groups B-/I- tags into entities;
- span extraction (the span head): ``AutoModelForQuestionAnswering`` (``start_logits``, ``end_logits``);
  ``pipeline("question-answering")`` with the task's window settings (``max_seq_len`` = ``max_length``,
  ``doc_stride``, ``max_answer_len`` = ``qa.max_answer_length``, ``align_to_words=False``) picks the same best
  span within a window (transformers 4; version 5 removed that pipeline, and the folder is used through
  ``AutoModelForQuestionAnswering``). Across windows the pipeline ranks spans by per-window probabilities where
  the toolkit ranks logit sums (BERT's rule), so a long context can get another answer.

``mtdnn_export.json`` records, per folder, its auto class, the pipeline task (None where the installed
``transformers`` has none) and the call arguments that reproduce ``mtdnn.predict`` (``serving``: ``{task:
{"auto_class", "pipeline", "arguments"}}``).

Whether a head is expressible is decided from the family itself, not from a list of families:

1. the task type must have a form and the head must be the type's plain head (``linear``, ``token``, ``span``:
   SAN has no counterpart), and a sentence-level head must read the encoder's pooler (``pooling: pooler``); a
   ``cls`` or ``mean`` pooled head, a ranking head or an MLM head has no such counterpart;
2. ``from_config`` of the form's auto class builds the family's model from the encoder's config; its base model
   must hold exactly the encoder's parameters (same names and shapes), except encoder parameters it leaves out
   (token-level models drop the pooler, which a token-level head never reads; RoBERTa's sequence-classification
   model drops the pooler and holds the same dense layer in its head);
3. the family's head parameters, in order, must have the shapes of the parameters our head computes with, in
   order: for a pooled head, the encoder parameters the base model left out, then the head's linear layer (BERT:
   ``classifier`` = our ``out``; RoBERTa: ``classifier.dense``, ``classifier.out_proj`` = the pooler's dense layer
   and our ``out``); for a token-level head, its linear layer (``classifier`` or ``qa_outputs`` = our ``out``);
4. with those weights loaded, the family's model must give our head's outputs on a probe batch (random pair
   input with padding, eval mode) to 1e-5, on the real pieces for span logits (our span head masks padding):
   equal shapes alone never pass a head that computes something else.

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
import transformers

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

    A regression task has one output, labelled ``score``; a sequence-labelling task one per tag; a span-extraction
    task two (start and end, the family's default labels). Where the family's config has ``classifier_dropout``,
    it is set to the head's dropout (it only matters when the model is trained further).
    """
    config = copy.deepcopy(encoder_config)
    form = task.kind.hf_model
    assert form is not None, f"task '{task.name}': a {task.type} head has no Hugging Face task model form"
    if form.outputs == "span":
        config.num_labels = 2
    else:
        names = [REGRESSION_LABEL] if form.outputs == "score" else list(task.labels)
        config.num_labels = len(names)
        config.id2label = dict(enumerate(names))
        config.label2id = {name: i for i, name in enumerate(names)}
    if form.problem_type is not None:
        config.problem_type = form.problem_type
    if hasattr(config, "classifier_dropout"):
        config.classifier_dropout = task.head.dropout
    return config


def pipeline_arguments(task: TaskDef) -> dict:
    """The ``transformers.pipeline`` call arguments with which the task's folder gives ``mtdnn.predict``'s
    outputs: all class probabilities with the toolkit's truncation (classification, regression), words tagged by
    their first piece (sequence labelling), the task's windows and answer length over pieces (span extraction)."""
    form = task.kind.hf_model
    if form.pipeline == "text-classification":
        return {"top_k": None, "truncation": True}
    if form.pipeline == "token-classification":
        return {"aggregation_strategy": "first"}
    qa = task.qa_spec
    return {"max_seq_len": task.max_length, "doc_stride": qa.doc_stride, "max_answer_len": qa.max_answer_length,
            "align_to_words": False}


def serving(task: TaskDef) -> dict:
    """How the task's folder is served: ``{"auto_class", "pipeline", "arguments"}`` (see
    :func:`pipeline_arguments`); ``pipeline`` is None, with a ``note``, where the installed ``transformers`` has
    no such pipeline (version 5 removed ``question-answering``: load the folder with its auto class)."""
    form = task.kind.hf_model
    record = {"auto_class": form.auto_class, "pipeline": form.pipeline, "arguments": pipeline_arguments(task)}
    if form.pipeline not in transformers.pipelines.SUPPORTED_TASKS:  # the attribute imports it lazily
        record["pipeline"] = None
        record["note"] = (f"transformers {transformers.__version__} has no '{form.pipeline}' pipeline: load the "
                          f"folder with {form.auto_class}; the arguments are the task's windows and answer length")
    return record


def convert_task(model: MultiTaskModel, task: TaskDef) -> Conversion:
    """``task``'s head on ``model``'s encoder as the family's own task model (``*ForSequenceClassification``,
    ``*ForTokenClassification``, ``*ForQuestionAnswering``), or the reason not.

    See the module docstring for the four checks. ``model`` is left in the training mode it had.
    Returns a :class:`Conversion` with ``model`` (eval mode, float32, CPU) or ``reason``.
    """

    form = task.kind.hf_model
    if form is None:
        return Conversion(task.name, reason=f"{task.type} head: {task.kind.no_hf_model}")
    kind = form.auto_class.removeprefix("AutoModelFor")
    if task.head_type != form.head:
        return Conversion(task.name, reason=f"head type '{task.head_type}': not a linear layer on the "
                                            f"{'pooled output' if task.kind.pools else 'pieces'}, which is all a "
                                            f"*For{kind} head is")
    if task.kind.pools and task.head.pooling != "pooler":
        pooled = {"cls": "the first token", "last": "the last token"}.get(task.head.pooling, "the mean of tokens")
        return Conversion(task.name, reason=f"pooling '{task.head.pooling}': a linear layer on {pooled}, not on the "
                                            f"encoder's pooled output as *For{kind} heads read it")
    encoder = model.encoder
    config = hf_config(encoder.config, task)
    try:
        hf = getattr(transformers, form.auto_class).from_config(config)
    except Exception as err:  # noqa: BLE001 - unknown or custom families raise many types; never fail the export
        return Conversion(task.name, reason=f"no {form.auto_class} for model type "
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
    # a pooled head computes with the encoder parameters its family's base model leaves out (RoBERTa's pooler);
    # a token-level head reads the pieces, never the pooler the base model drops (the probe checks both)
    ours_head = [(k, v) for k, v in ours.items() if k not in base] if task.kind.pools else []
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
    encoder has token types. Both models in eval mode (no dropout); ``model``'s mode is restored. Span logits
    ``(3, 12, 2)`` are compared on real pieces only; other outputs everywhere (``(3, labels)``, ``(3,)``,
    ``(3, 12, tags)``).
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
    out = hf(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    outputs = task.kind.hf_model.outputs
    if outputs == "span":
        theirs = torch.stack([out.start_logits, out.end_logits], dim=-1)
    else:
        theirs = out.logits.squeeze(-1) if outputs == "score" else out.logits
    if theirs.shape != ours.shape:
        return float("inf")
    difference = (ours.float() - theirs.float()).abs()
    if outputs == "span":  # our span head masks padding to a large negative logit; the family's leaves it
        difference = difference[attention_mask.bool()]
    return float(difference.max())


def write_hf_models(model: MultiTaskModel, tokenizer, tasks: dict[str, TaskDef], out_dir: Path
                    ) -> tuple[dict[str, str], dict[str, str], dict[str, dict]]:
    """Write ``out_dir/hf/<task>/`` for every expressible task; ``({task: folder}, {task: reason}, {task:
    serving})``, the last as :func:`serving` records it.

    The folders are relative to ``out_dir``. Each holds the model (``save_pretrained``) and the tokenizer with
    ``model_max_length`` = the task's ``max_length``, so that ``truncation=True`` in the pipeline truncates as
    the toolkit does.
    """
    folders, toolkit_only, served = {}, {}, {}
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
        served[name] = serving(task)
    return folders, toolkit_only, served
