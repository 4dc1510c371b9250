"""What a training run trains, resolved from its :class:`TrainConfig`: the tasks, the data root and the run
directory (a pure function of the settings, so DDP ranks agree), the pooling chosen for the encoder, the heads
copied from an export, the data module; whether this process is rank zero of the run."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from ..errors import CheckpointError, ConfigError, check_bools
from ..fileio import NAME_MAX, read_safetensors, read_yaml
from ..tasks.reading import check_files, resolve_data_dir
from ..tasks.taskdef import TaskDef, load_task_defs, select_tasks
from .config import TrainConfig
from .flags import check_loggers, check_trainer_flags
from .ranks import is_global_zero  # re-exported: callers ask a TrainConfig's rank here
from .rundirs import check_run_dir, check_unfinished, is_run_dir, read_metrics

log = logging.getLogger("mtdnn.train")


def default_output_dir(task_defs: str, tasks: list[str], seed: int, limit_train_examples: int | None = None,
                       limit_eval_examples: int | None = None) -> Path:
    """``runs/<yaml stem>-<task>-<task>...-seed<seed>``: a pure function of the settings (DDP ranks agree).

    A limited run (``limit_train_examples``/``limit_eval_examples``) gets its own directory, suffixed
    ``-limited-train<N>-dev<M>``, so that it never takes the place of a full run that teachers build from.
    A name that would be longer than 255 bytes (many tasks) lists the first tasks, then the number of tasks and a
    digest of the whole list: ``glue-cola-mnli-...-and-120-tasks-<sha1[:10]>-seed42``.
    """

    limits = "".join(f"-{what}{n}" for what, n in (("train", limit_train_examples), ("dev", limit_eval_examples)) if n)
    suffix = f"-seed{seed}{'-limited' + limits if limits else ''}"
    stem = Path(task_defs).stem
    name = f"{stem}-{'-'.join(tasks)}{suffix}"
    if len(name.encode()) > NAME_MAX:
        digest = hashlib.sha1("\n".join(tasks).encode()).hexdigest()[:10]
        tail = f"-and-{len(tasks)}-tasks-{digest}{suffix}"
        head = f"{stem}-{'-'.join(tasks)}".encode()[:NAME_MAX - len(tail.encode())].decode(errors="ignore")
        name = head.rsplit("-", 1)[0] + tail
    return Path("runs") / name


def run_limits(run: str | Path) -> dict[str, int]:
    """The ``limit_*_examples`` a training run was made with (its ``config.yaml``); empty for a full run or when
    the run has no configuration (an export directory)."""
    # keeps torch out of import time
    from .runs import CONFIG_FILE

    path = Path(run) / CONFIG_FILE
    if not path.is_file():
        return {}
    config = read_yaml(path, CheckpointError, "run configuration")
    if not isinstance(config, dict):
        return {}
    settings = config.get("args") if isinstance(config.get("args"), dict) else config  # older runs: under args
    return {k: settings[k] for k in ("limit_train_examples", "limit_eval_examples") if settings.get(k)}


def config_is_global_zero(config: TrainConfig) -> bool:
    """Whether this process is global rank zero of the run ``config`` describes (its devices and nodes;
    :func:`mtdnn.training.ranks.is_global_zero`)."""
    return is_global_zero(config.devices if isinstance(config.devices, int) else None, config.num_nodes)


def copy_matching_heads(model, export_dir: Path, tasks: dict[str, TaskDef]) -> list[str]:
    """Load the heads of ``export_dir`` whose task name, type and output size match; return their names."""
    # keeps torch out of import time
    from .export import load_export_tasks

    saved_tasks = load_export_tasks(export_dir)
    state = read_safetensors(export_dir / "heads.safetensors")
    copied = []
    for name, task in tasks.items():
        old = saved_tasks.get(name)
        if old is None or old.type != task.type or old.head_type != task.head_type or \
                old.num_outputs != task.num_outputs or old.labels != task.labels:
            continue
        model.heads[name].load_state_dict({k[len(name) + 1:]: v for k, v in state.items() if k.startswith(name + ".")})
        copied.append(name)
    return copied


def log_pooling(asked: dict[str, TaskDef], model) -> dict[str, TaskDef]:
    """Log each task's pooling and whether the toolkit chose it; return the model's tasks (pooling resolved).

    ``asked``: the task definitions as written; ``model``: the :class:`~mtdnn.modeling.model.MultiTaskModel` built
    from them, whose ``tasks`` carry the pooling chosen for the encoder (recorded in ``config.yaml`` and the export).
    """
    family = getattr(model.encoder.config, "model_type", type(model.encoder).__name__)
    for name, task in model.tasks.items():
        if not task.kind.pools:  # token-level and MLM heads: no pooling used, none logged
            continue
        how = f"chosen for the {family} encoder" if asked[name].head.pooling is None else "set by the task"
        log.info("task '%s': head.pooling %s (%s)", name, task.head.pooling, how)
    return dict(model.tasks)


def resolve_tasks(config: TrainConfig) -> dict[str, TaskDef]:
    """The tasks ``config`` trains: ``tasks``, or every task of ``task_defs`` with a train split.

    Raises:
        ConfigError: an unknown task, a task without a train split, or no dev split to select on.
    """
    all_tasks = load_task_defs(config.task_defs)
    names = config.tasks
    if names is None:  # every task that can be trained; the others are evaluation-only
        untrainable = [n for n, t in all_tasks.items() if "train" not in t.splits]
        if untrainable:
            log.info("%s: training every task with a train split; %s have none (evaluation only)",
                     config.task_defs, ", ".join(untrainable))
        names = [n for n in all_tasks if n not in untrainable] or list(all_tasks)
    tasks = select_tasks(all_tasks, names, config.task_defs)
    for name, task in tasks.items():
        if "train" not in task.splits:
            raise ConfigError(f"{config.task_defs}: task '{name}' has no train split; it can be evaluated, not trained")
    if not any("dev" in t.splits and t.kind.selected for t in tasks.values()):
        raise ConfigError(f"{config.task_defs}: none of the tasks {', '.join(tasks)} has a dev split to select on "
                          "(mlm tasks are scored on dev but never select the best epoch)")
    return tasks


def resolve_config(config: TrainConfig, tasks: dict[str, TaskDef] | None = None,
                   resolve_data: bool = True) -> tuple[TrainConfig, dict[str, TaskDef]]:
    """``config`` with the trained tasks, the data root and the run directory filled in, and the tasks
    (``tasks``: already resolved by the caller, as the student's; else :func:`resolve_tasks`). ``resolve_data``
    False leaves ``data_dir`` as it is (a fine-tune whose data module brings its data).

    Raises:
        ConfigError, DataError: see :func:`resolve_tasks` and :func:`mtdnn.tasks.data.resolve_data_dir`.
    """
    tasks = tasks if tasks is not None else resolve_tasks(config)
    data_dir = resolve_data_dir(config.data_dir) if resolve_data else config.data_dir
    output_dir = config.output_dir or str(default_output_dir(config.task_defs, list(tasks), config.seed,
                                                              config.limit_train_examples,
                                                              config.limit_eval_examples))
    return config.updated(tasks=list(tasks), data_dir=str(data_dir) if data_dir is not None else None,
                          output_dir=output_dir), tasks


def check_run(config: TrainConfig, *, overwrite: bool = False, resume: bool = False,
              tasks: dict[str, TaskDef] | None = None, check_data_files: bool = True, run_dir: bool = True,
              output_flag: str = "--output-dir") -> tuple[TrainConfig, dict[str, TaskDef], Path | None]:
    """The checks of a training run that need no model, made first so that a refused input costs well under a
    second (``python -m mtdnn.train`` calls this before it imports the trainer; the pipeline's
    :func:`~mtdnn.training.pipeline.plan` starts with it): ``overwrite``/``resume``, the task definitions and the
    tasks (:func:`resolve_config`), the data root, the loggers, the run directory (new, empty or a run of this
    toolkit; an interrupted one only with ``resume`` or ``overwrite``), the train and dev files, and last
    Lightning's flags (judged by Lightning's own accelerator connector, the one check that imports it).

    Args:
        tasks, check_data_files: see :func:`resolve_config` (``check_data_files`` False: the data module brings
            its data, and neither the root nor the files are checked).
        run_dir: whether the run has a run directory to check (a fine-tune inside another command may not).
        output_flag: how messages name the run directory.

    Returns:
        ``(resolved config, tasks, run directory or None)``.

    Raises:
        ConfigError, DataError, CheckpointError, UserError: naming the flag, file, task or directory.
    """
    check_bools("fit()", overwrite=overwrite, resume=resume)
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite contradict each other")
    config, tasks = resolve_config(config, tasks, resolve_data=check_data_files)
    check_loggers(config)
    directory = None
    if run_dir:
        directory = check_run_dir(config.output_dir, output_flag)
        # an interrupted run there is refused on rank zero only (the other ranks of a DDP run start after rank 0
        # wrote config.yaml); asking the rank imports Lightning, so only when there is such a run to refuse
        if (not (resume or overwrite) and is_run_dir(directory) and read_metrics(directory) is None
                and config_is_global_zero(config)):
            check_unfinished(directory, overwrite, resume, output_flag)
    if check_data_files:
        data_dir = Path(config.data_dir) if config.data_dir else None
        for task in tasks.values():
            check_files(task, [s for s in ("train", "dev") if s in task.splits], data_dir)
    check_trainer_flags(config)  # last: Lightning itself judges them, and importing it takes seconds
    return config, tasks, directory


def datamodule_for(config: TrainConfig, tasks: dict[str, TaskDef], tokenizer, cls, **extra):
    """The data module of ``config`` (``cls``: :class:`~mtdnn.training.datamodule.MultiTaskDataModule` or a
    subclass; ``extra``: its own arguments)."""
    return cls(tasks, Path(config.data_dir), tokenizer, batch_size=config.batch_size,
               eval_batch_size=config.eval_batch_size, schedule=config.schedule,
               temperature=config.temperature if config.schedule == "temperature" else 1.0,
               seed=config.seed if config.data_seed is None else config.data_seed,
               limit_train_examples=config.limit_train_examples, max_length=config.max_length,
               pad_to_multiple_of=config.pad_to_multiple_of, num_workers=config.num_workers,
               limit_eval_examples=config.limit_eval_examples, accumulate_grad_batches=config.accumulate_grad_batches,
               length_buckets=config.length_buckets, group_by_length=config.group_by_length, **extra)
