"""A trained model for Python callers: predict raw text, score labelled splits (what :func:`mtdnn.load` returns)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import ConfigError, DataError, check_bools
from ..fileio import quote_prefix
from .evaluate import evaluate
from .predict import input_columns, make_example, predict_examples


def _fields(item, index: int, task: str, columns: list[str]) -> list[str]:
    """The texts of one input of :meth:`TrainedModel.predict`, in ``columns`` order.

    Raises:
        DataError: naming the input's index and what it is (see :meth:`TrainedModel.predict`).
    """
    where = f"predict: input {index}: task '{task}'"
    wanted = f"{len(columns)} text(s) ({', '.join(columns)})"
    if isinstance(item, str):
        fields = [item]
    elif isinstance(item, tuple):
        fields = list(item)
    elif isinstance(item, Mapping):
        missing = [c for c in columns if c not in item]
        if missing:
            keys = ", ".join(quote_prefix(k, 40) for k in list(item)[:10])
            raise DataError(f"{where}: the mapping has no key {missing[0]!r} (the task's columns: "
                            f"{', '.join(columns)}; its keys: {keys or 'none'})")
        fields = [item[c] for c in columns]
    else:
        hint = "; give the texts as a tuple" if isinstance(item, (list, set, frozenset)) else ""
        raise DataError(f"{where}: expected a string, a tuple of {wanted} or a mapping of those columns to "
                        f"strings, found {type(item).__name__} (value: {quote_prefix(item)}){hint}")
    for k, value in enumerate(fields):
        if not isinstance(value, str):
            raise DataError(f"{where}, field '{columns[k] if k < len(columns) else k}': expected a string, found "
                            f"{type(value).__name__} (value: {quote_prefix(value)})")
    if len(fields) != len(columns):
        raise DataError(f"{where}: takes {wanted}, got {len(fields)}: {quote_prefix(item)}")
    return fields


class TrainedModel:
    """A run's best checkpoint (or another), or an export, loaded on CPU in eval mode.

    Wraps :class:`mtdnn.training.inference.LoadedModel`; predictions and scores are those of ``python -m
    mtdnn.predict`` and ``python -m mtdnn.evaluate`` (the same batching, so the same numbers).
    """

    def __init__(self, loaded, device: str = "auto"):
        self.loaded, self.device = loaded, device

    @property
    def tasks(self) -> dict:
        """``{name: TaskDef}`` of the tasks the model has heads for."""
        return self.loaded.tasks

    def _task(self, task: str | None):
        if task is None:
            if len(self.tasks) > 1:
                raise ConfigError(f"{self.loaded.model_dir}: several tasks ({', '.join(self.tasks)}); name one "
                                  "with task=")
            task = next(iter(self.tasks))
        return self.loaded.task(task)

    def predict(self, inputs: str | Sequence[str | tuple[str, ...] | Mapping[str, str]], task: str | None = None,
                batch_size: int | None = None) -> list[dict]:
        """Predictions for raw text, one per input, in order.

        Args:
            inputs: one text per example (``["a film ..."]``), or one tuple per example holding the task's text
                columns in order (premise and hypothesis: ``[("The cat sat.", "A cat was sitting.")]``; ranking
                tasks: the question, then the candidates), or one mapping per example keyed by those column
                names (``[{"sentence1": "The cat sat.", "sentence2": "A cat was sitting."}]``; other keys are
                ignored, as in ``--input`` JSON lines); a single string, tuple or mapping is one example.
                Token-level tasks take raw text as ``mtdnn.predict`` does: sequence labelling one text per example
                (split into words by the encoder's pre-tokenizer), span extraction a ``(question, context)``
                tuple or a ``{"question", "context"}`` mapping.
            task: the task whose head predicts (default: the model's only task).

        Returns:
            Per example: ``{"prediction": label, "probability": p, "probabilities": {label: p}}`` (softmax of
            the logits); regression: ``{"prediction": score}``; ranking: the chosen candidate's index; sequence
            labelling: ``{"id", "tokens": [{"word", "start", "end", "tag"}], "entities": [{"type", "text",
            "start", "end"}]}`` (character offsets into the text, end exclusive); span extraction: ``{"id",
            "answer", "start", "end", "score", "n_best"}`` (offsets into the context). The same rows as
            ``mtdnn.predict --format jsonl``.

        Raises:
            ConfigError: an unknown task, or no task named for a multi-task model.
            DataError: naming the input's index: an item that is not a string, a tuple of strings or a mapping
                of the task's columns to strings (a list, bytes, a number...), the wrong number of texts, or a
                mapping without one of the task's columns.
        """
        # keeps torch out of import time
        from ..tasks.tokenized import tokenize_examples

        definition = self._task(task)
        if isinstance(inputs, (str, tuple, Mapping)):
            inputs = [inputs]
        elif not isinstance(inputs, Sequence) or isinstance(inputs, (bytes, bytearray)):
            raise DataError(f"predict: inputs must be a text, a tuple or mapping of texts, or a list of them "
                            f"(got {type(inputs).__name__})")
        if definition.kind.prediction_unit is not None:  # token-level: raw text, as mtdnn.predict reads it
            # keeps torch out of import time
            from ..training.inference import resolve_device
            from .token_predict import predict_token_rows, raw_columns, raw_record

            columns = raw_columns(definition)
            records = [raw_record(f"predict: input {i}: task '{definition.name}'", str(i), columns,
                                  _fields(item, i, definition.name, columns)) for i, item in enumerate(inputs)]
            if not records:
                return []
            return predict_token_rows(definition, self.loaded, records=records, batch_size=batch_size,
                                      device=resolve_device(self.device))
        columns = input_columns(definition)
        examples = []
        for i, item in enumerate(inputs):
            fields = _fields(item, i, definition.name, columns)
            examples.append(make_example(definition, fields, str(i), i + 1))
        if not examples:
            return []
        split = tokenize_examples(examples, definition, self.loaded.tokenizer, self.loaded.max_length)
        return predict_examples(self.loaded, definition, split, batch_size, self.device)

    def evaluate(self, task: str | Sequence[str] | None = None, split: str = "dev",
                 data_dir: str | Path | None = None, batch_size: int | None = None) -> dict:
        """Scores on a labelled split (see :func:`mtdnn.evaluation.evaluate.evaluate`).

        Args:
            task: a task, several, or None for every task of the model that has ``split``.

        Returns:
            ``{"split", "data_dir", "tasks": {task: {metric: value}}, "examples": {task: n}, "average"}``.

        Raises:
            ConfigError, DataError: an unknown task, a task without the split, or an unlabelled split.
        """

        names = [task] if isinstance(task, str) else (list(task) if task is not None else None)
        return evaluate(self.loaded, names, split, data_dir, batch_size, self.device)

    def __repr__(self) -> str:
        return f"TrainedModel({str(self.loaded.model_dir)!r}, tasks={list(self.tasks)})"


def load(path: str | Path, checkpoint: str | None = None, device: str = "auto", *,
         trust_remote_code: bool = False) -> TrainedModel:
    """Load a complete run directory (its best checkpoint, or ``checkpoint``) or an export directory.

    Args:
        trust_remote_code: let the encoder's folder run code of its own; never taken from the run's files (see
            :func:`mtdnn.training.inference.check_remote_code`).

    Raises:
        CheckpointError: no such directory, an incomplete run, a missing or damaged checkpoint.
        ConfigError: an argument of the wrong type; an encoder asking for remote code without the keyword.
    """

    # keeps torch out of import time
    from ..training.inference import load_model, resolve_device

    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"load(path): expected a run or export directory as a str or Path (got "
                          f"{type(path).__name__} {path!r:.40})")
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
        raise ConfigError(f"load(checkpoint=): expected a path or None (got {type(checkpoint).__name__})")
    if not isinstance(device, str):
        raise ConfigError(f"load(device=): expected a device name such as 'cpu' (got {type(device).__name__})")
    check_bools("load()", trust_remote_code=trust_remote_code)
    resolve_device(device)
    return TrainedModel(load_model(path, checkpoint, trust_remote_code), device)
