"""Using a trained model: load it from a run or an export, score examples in batches, decode the outputs.

    run directory (best checkpoint, or --checkpoint) | export directory
        --load_model--> LoadedModel(model, tokenizer, tasks, the run's evaluation settings)
    TokenizedSplit --predict_outputs--> outputs in input order: logits (n, classes) | scores (n,) | (n, candidates)
    outputs --decode--> label names (or scores for regression) with probabilities

Batches are formed exactly as training's dev evaluation forms them (:class:`mtdnn.tasks.schedule.EvalBatchSampler`:
longest first, the run's eval batch size and padding multiple), so that ``mtdnn.evaluate`` on a run's best
checkpoint reproduces its ``metrics.json`` to the bit (a run trained in one process, scored on the same kind of
device): the same examples meet in the same padded batches, in the same order, and torchmetrics accumulates
them in that order. (A DDP run's ranks each scored a shard, so its numbers can differ in the last digits.) Sorting by length also keeps padding small,
which is most of the speed of batched prediction; the outputs are put back in input order.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ..errors import CheckpointError, ConfigError
from ..modeling.metrics import update_metrics
from ..modeling.model import MultiTaskModel, check_remote_code, load_encoder, load_tokenizer  # noqa: F401
from ..tasks.collate import collate
from ..tasks.data import resolve_data_dir
from ..tasks.schedule import EvalBatchSampler
from ..tasks.taskdef import MAX_LENGTH_RANGE, TaskDef, parse_tasks
from ..tasks.tokenized import TokenizedSplit
from .export import is_export_dir, load_export
from .runs import EXPORT_DIR, complete_run, load_checkpoint_file, read_run_config

DEFAULT_BATCH_SIZE = 64  # training's --eval-batch-size default


@dataclass
class LoadedModel:
    """A trained model ready for inference (eval mode) and the settings its run evaluated with.

    ``source`` is the checkpoint file or export directory that was loaded; ``data_dir`` the run's data root
    (None for an export); ``max_length`` the run's ``--max-length`` override (None: each task's own).
    """

    model: MultiTaskModel
    tokenizer: Any
    tasks: dict[str, TaskDef]
    model_dir: Path
    source: str
    eval_batch_size: int = DEFAULT_BATCH_SIZE
    max_length: int | None = None
    pad_to_multiple_of: int = 1
    data_dir: str | None = None
    limit_eval_examples: int | None = None  # the run's --limit-eval-examples (its dev scores cover that many)

    def task(self, name: str) -> TaskDef:
        """The definition of a task the model has a head for.

        Raises:
            ConfigError: the model was not trained on ``name``.
        """
        if name not in self.tasks:
            raise ConfigError(f"{self.model_dir}: task '{name}' was not trained by this model "
                              f"(its tasks: {', '.join(self.tasks)})")
        return self.tasks[name]

    def resolve_data_dir(self, flag: str | None) -> Path:
        """``--data-dir``, else the run's data root when it still exists, else the default data root."""
        if flag is None and self.data_dir and Path(self.data_dir).is_dir():
            return Path(self.data_dir)
        return resolve_data_dir(flag)


def _checkpoint_path(run_dir: Path, checkpoint: str | None, metrics: dict) -> Path:
    """``--checkpoint`` as given or relative to the run directory; by default the run's best checkpoint."""
    if checkpoint is None:
        return run_dir / metrics["best"]["checkpoint"]
    given = Path(checkpoint)
    return given if given.is_file() or given.is_absolute() else run_dir / given


def eval_settings(settings: dict, run_dir: Path) -> dict:
    """The evaluation settings of a run's ``config.yaml`` (:class:`LoadedModel` fields), each checked.

    Raises:
        CheckpointError: naming ``config.yaml`` and the field: ``eval_batch_size`` or ``pad_to_multiple_of`` not
            a positive integer, ``max_length`` not an integer in the tokenizer range, ``data_dir`` not a string.
    """

    where = Path(run_dir) / "config.yaml"

    def integer(field: str, default, low: int, high: int | None = None):
        value = settings.get(field)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise CheckpointError(f"{where}: field '{field}': expected an integer {bound} (value: {value!r})")
        return value

    data_dir = settings.get("data_dir")
    if data_dir is not None and not isinstance(data_dir, str):
        raise CheckpointError(f"{where}: field 'data_dir': expected a path (value: {data_dir!r})")
    return {"eval_batch_size": integer("eval_batch_size", DEFAULT_BATCH_SIZE, 1),
            "max_length": integer("max_length", None, *MAX_LENGTH_RANGE),
            "pad_to_multiple_of": integer("pad_to_multiple_of", 1, 1),
            "data_dir": data_dir,
            "limit_eval_examples": integer("limit_eval_examples", None, 1)}


def _load_run(run_dir: Path, checkpoint: str | None, trust_remote_code: bool = False) -> LoadedModel:
    metrics = complete_run(run_dir)
    settings, resolved = read_run_config(run_dir)
    path = _checkpoint_path(run_dir, checkpoint, metrics)
    if checkpoint is None and not path.is_file() and is_export_dir(run_dir / EXPORT_DIR):
        # a teacher member keeps its export only (its checkpoints are removed to save disk): the same weights
        check_remote_code(run_dir / EXPORT_DIR / "encoder", trust_remote_code)
        model, tokenizer, tasks = load_export(run_dir / EXPORT_DIR, trust_remote_code)
        return LoadedModel(model, tokenizer, tasks, run_dir, str(run_dir / EXPORT_DIR),
                           **eval_settings(settings, run_dir))
    state = load_checkpoint_file(path)
    hparams, weights = state.get("hyper_parameters"), state.get("state_dict")
    if not isinstance(hparams, dict) or not isinstance(hparams.get("tasks"), dict) or not isinstance(weights, dict):
        raise CheckpointError(f"{path}: not an mtdnn training checkpoint (no hyper_parameters.tasks or state_dict)")
    definitions = {n: {k: v for k, v in t.items() if k != "name"} for n, t in hparams["tasks"].items()}
    tasks = parse_tasks({"tasks": definitions}, str(path))
    # The architecture and tokenizer come from the run's export (always local); the weights from the checkpoint.
    export_encoder = run_dir / EXPORT_DIR / "encoder"
    encoder_name = str(export_encoder if export_encoder.is_dir() else hparams.get("encoder", resolved.get("encoder")))
    # trust_remote_code is this invocation's flag only; the checkpoint saying it was trained with it is not enough
    check_remote_code(encoder_name, trust_remote_code, str(path) if hparams.get("trust_remote_code") else None)
    if Path(encoder_name).is_dir():
        check_remote_code(encoder_name, trust_remote_code)
    trust = trust_remote_code
    model = MultiTaskModel(load_encoder(encoder_name, trust), tasks)
    try:
        model.load_state_dict({k.removeprefix("model."): v for k, v in weights.items() if k.startswith("model.")})
    except RuntimeError as err:
        raise CheckpointError(f"{path}: its weights do not fit the run's model ({err})") from None
    return LoadedModel(model.eval(), load_tokenizer(encoder_name, trust), tasks, run_dir, str(path),
                       **eval_settings(settings, run_dir))


def resolve_device(name: str) -> str:
    """``auto``: cuda when available, else cpu; any other name (cpu, cuda:1, mps) is checked and returned.

    Raises:
        ConfigError: naming ``--device``: not a torch device, or a CUDA device this machine does not have.
    """
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as err:
        raise ConfigError(f"--device {name}: not a device ({err})") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (device.index is not None and device.index >= count):
            raise ConfigError(f"--device {name}: this machine has {count} CUDA device(s)")
    return name


def load_model(path: str | Path, checkpoint: str | None = None, trust_remote_code: bool = False) -> LoadedModel:
    """Load a trained model, on CPU in eval mode, from a complete run directory or an export directory.

    A run gives its best checkpoint (``metrics.json``'s ``best.checkpoint``) unless ``checkpoint`` names
    another (a path, or one relative to the run directory), and the evaluation settings of ``config.yaml``.
    An export needs nothing else: encoder, tokenizer, heads and task definitions are all inside it.

    ``trust_remote_code``: this invocation's ``--trust-remote-code`` (:func:`check_remote_code`); an encoder that
    asks to run code of its own is refused without it, whatever the run's files say.

    Raises:
        CheckpointError: no such directory, an incomplete run, a missing or damaged checkpoint.
        ConfigError: ``checkpoint`` given with an export; an encoder that asks for remote code without the flag.
    """
    path = Path(path)
    if is_export_dir(path):
        if checkpoint is not None:
            raise ConfigError(f"--checkpoint: {path} is an export (one model); checkpoints belong to run directories")
        check_remote_code(path / "encoder", trust_remote_code)
        model, tokenizer, tasks = load_export(path, trust_remote_code)
        return LoadedModel(model, tokenizer, tasks, path, str(path))
    return _load_run(path, checkpoint, trust_remote_code)


@torch.inference_mode()
def predict_outputs(model: MultiTaskModel, task: TaskDef, split: TokenizedSplit, pad_token_id: int,
                    batch_size: int = DEFAULT_BATCH_SIZE, pad_to_multiple_of: int = 1, metrics=None,
                    device: str | torch.device = "cpu", progress: str | None = None) -> torch.Tensor:
    """The head's outputs for every row of ``split``, in the split's order, float32 on CPU.

    Rows are batched longest first (:class:`~mtdnn.tasks.schedule.EvalBatchSampler`) and dynamically padded.
    Returns logits ``(n, num_labels)`` (classification), scores ``(n,)`` (regression), candidate scores
    ``(n, num_candidates)`` (ranking), or per-piece outputs ``(n, seq_len, k)`` of the token-level types, padded
    to the longest row with -1e4 (below any real logit). When ``metrics`` (a torchmetrics collection on ``device``) is given and
    the split is labelled, every batch is added to it in batch order, as training's validation does.
    With ``progress`` (a label such as ``"rte dev"``), a line says what is scored and, on a terminal, a progress
    bar counts the batches (on stderr).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch size: expected a positive integer (got {batch_size!r:.40})")
    batches = EvalBatchSampler(split.lengths, batch_size)
    if progress:

        print(f"{progress}: {len(split)} examples in {len(batches)} batches on {device}", file=sys.stderr, flush=True)
        batches = tqdm(batches, desc=progress, unit="batch", file=sys.stderr, disable=None, leave=False)
    orders, outputs = [], []
    for rows in batches:
        batch = collate([split[i] for i in rows], task, pad_token_id, pad_to_multiple_of,
                        padding_side=split.padding_side)
        types = batch.token_type_ids
        extra = {} if batch.head_inputs is None else {"head_inputs": {k: v.to(device) for k, v in batch.head_inputs.items()}}
        out = model(task.name, batch.input_ids.to(device), batch.attention_mask.to(device),
                    None if types is None else types.to(device), **extra)
        if metrics is not None and batch.labels is not None:
            update_metrics(metrics, task.type, out, batch.labels.to(device), batch.weight.to(device))
        orders.append(batch.idx)
        outputs.append(out.float().cpu())
    if outputs[0].dim() == 3:  # token-level outputs: batches differ in seq_len
        longest = max(o.shape[1] for o in outputs)
        outputs = [torch.nn.functional.pad(o, (0, 0, 0, longest - o.shape[1]), value=-1e4) for o in outputs]
    result = torch.cat(outputs)
    restored = torch.empty_like(result)
    restored[torch.cat(orders)] = result
    return restored


def decode(task: TaskDef, outputs: torch.Tensor) -> list[dict]:
    """Turn head outputs into predictions, one dict per row, with the type's ``decode``
    (:class:`mtdnn.tasks.types.TaskKind`).

    classification: ``{"prediction": label name, "probability": p, "probabilities": {label: p}}`` with
    p = softmax(logits); regression: ``{"prediction": score}``; ranking: the index of the chosen candidate,
    with the softmax over the group keyed by candidate column.
    """
    kind = task.kind
    if kind.decode is None:
        raise ConfigError(f"task '{task.name}' is an {task.type} task: it has no predictions ({kind.no_predictions})")
    return kind.decode(task, outputs)
