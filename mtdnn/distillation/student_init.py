"""Where the student starts: the encoder (pre-trained, the multi-task run's, or any), never a teacher member, and
a smaller copy of it (a subset of its layers, DistilBERT-style)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import ConfigError
from ..modeling.model import load_encoder, resolve_encoder
from .multitask_run import multitask_export, pretrained_encoder
from .student_spec import InitSpec, StudentSpec


def resolve_init(spec: StudentSpec, spec_path: str, mt_run: str | None,
                 teacher_dir: Path | None) -> tuple[str, Path | None]:
    """The student's encoder (name or path) and the export whose matching heads it copies (``multitask``), or None.

    Raises:
        ConfigError: ``pretrained``/``multitask`` without a multi-task run, or a teacher member as the start.
        CheckpointError: the multi-task run is incomplete.
    """

    choice, heads_from = spec.init.encoder, None
    if choice in ("pretrained", "multitask"):
        if not mt_run:
            raise ConfigError(f"{spec_path}: field 'init.encoder': '{choice}' needs the multi-task run (set "
                              "from_run, pass --from-run, or give a teacher directory that names it)")
        export = multitask_export(mt_run, f"{spec_path}: field 'init.encoder' ('{choice}')")
        if choice == "pretrained":
            source = pretrained_encoder(Path(mt_run))
        else:
            heads_from, source = export, str(export / "encoder")
    else:
        source = choice
    if teacher_dir is not None:
        for candidate in (Path(resolve_encoder(source)), Path(mt_run) if mt_run else None):
            if candidate is not None and candidate.exists() and \
                    candidate.resolve().is_relative_to(Path(teacher_dir).resolve()):
                raise ConfigError(f"{spec_path}: field 'init.encoder': {candidate} is inside the teacher directory "
                                  f"{teacher_dir}; a student never starts from a teacher member (use pretrained, "
                                  "multitask or another encoder)")
    return source, heads_from


# Where each family keeps its list of separate layers (attribute path from the base model).
LAYER_LISTS = ("encoder.layer",      # BERT, RoBERTa, ELECTRA, DeBERTa-v2, MiniLM
               "transformer.layer",  # DistilBERT
               "layers",             # ModernBERT
               "layer")              # XLNet


def _layer_list(encoder: torch.nn.Module) -> tuple[torch.nn.Module, str, torch.nn.ModuleList] | None:
    for path in LAYER_LISTS:
        owner_path, _, attr = path.rpartition(".")
        owner = encoder
        for part in owner_path.split(".") if owner_path else []:
            owner = getattr(owner, part, None)
        blocks = getattr(owner, attr, None)
        if isinstance(blocks, torch.nn.ModuleList):
            return owner, attr, blocks
    return None


def _shares_layers(encoder: torch.nn.Module) -> bool:
    """ALBERT: one layer group's weights run ``num_hidden_layers`` times (Lan et al. 2019, arXiv 1909.11942)."""
    return hasattr(getattr(encoder, "encoder", None), "albert_layer_groups")


def select_layers(encoder: torch.nn.Module, layers: list[int], where: str) -> torch.nn.Module:
    """Keep only ``layers`` (0-based, increasing) of the encoder's separate layers, in place.

    DistilBERT (Sanh et al. 2019, arXiv 1910.01108) initialises its student from every other teacher layer.
    Works for every family with a list of separate layers (:data:`LAYER_LISTS`: BERT, RoBERTa, ELECTRA,
    DeBERTa-v2, DistilBERT, XLNet, ModernBERT). ModernBERT keeps each kept layer's attention type (global or
    local: ``config.layer_types``); its layer 0 must be kept, since it alone has no attention LayerNorm (it
    follows the embedding norm) and a reloaded student would rebuild its first layer that way.

    Raises:
        ConfigError: a shared-layer encoder (ALBERT: use ``num_layers``), an encoder without a known layer
            list, an index out of range or repeated, or a ModernBERT list without layer 0.
    """
    if _shares_layers(encoder):
        raise ConfigError(f"{where}: {type(encoder).__name__} shares one layer's weights across all its "
                          f"{encoder.config.num_hidden_layers} layers, so there are no separate layers to pick "
                          f"(got {layers}); set init.num_layers instead to run the shared layer fewer times")
    found = _layer_list(encoder)
    if found is None:
        raise ConfigError(f"{where}: {type(encoder).__name__} has no list of separate layers this toolkit knows "
                          f"({', '.join(LAYER_LISTS)}); layer selection supports BERT, RoBERTa, ELECTRA, DeBERTa-v2, "
                          "DistilBERT, XLNet and ModernBERT")
    owner, attr, blocks = found
    if any(not 0 <= i < len(blocks) for i in layers) or sorted(set(layers)) != list(layers):
        raise ConfigError(f"{where}: layers must be increasing indices in 0..{len(blocks) - 1} (got {layers})")
    if getattr(encoder.config, "model_type", "") == "modernbert" and layers[0] != 0:
        raise ConfigError(f"{where}: a ModernBERT student must keep layer 0, the only layer without an attention "
                          f"LayerNorm (got {layers})")
    setattr(owner, attr, torch.nn.ModuleList([blocks[i] for i in layers]))
    encoder.config.num_hidden_layers = len(layers)
    if isinstance(getattr(encoder.config, "layer_types", None), list):
        encoder.config.layer_types = [encoder.config.layer_types[i] for i in layers]
    return encoder


def truncate_layers(encoder: torch.nn.Module, num_layers: int, where: str) -> torch.nn.Module:
    """The first ``num_layers`` layers of the encoder, in place; for ALBERT, its shared layer run that many times.

    Raises:
        ConfigError: ``num_layers`` is not in 1..the encoder's layer count, or an ALBERT with several layer groups
            (which group a layer uses depends on the layer count).
    """
    total = encoder.config.num_hidden_layers
    if not 1 <= num_layers <= total:
        raise ConfigError(f"{where}: must be in 1..{total}, the encoder's layer count (got {num_layers})")
    if not _shares_layers(encoder):
        return select_layers(encoder, list(range(num_layers)), where)
    if getattr(encoder.config, "num_hidden_groups", 1) != 1:
        raise ConfigError(f"{where}: this ALBERT has {encoder.config.num_hidden_groups} layer groups; only one "
                          "shared group can be run a different number of times")
    encoder.config.num_hidden_layers = num_layers
    return encoder


def student_encoder(source: str, init: InitSpec, where: str) -> torch.nn.Module | None:
    """The student's encoder loaded from ``source`` with ``init.layers`` or ``init.num_layers`` applied; None
    when neither is set (the student is then ``source`` unchanged).

    Raises:
        ConfigError: see :func:`select_layers` and :func:`truncate_layers`.
    """

    if init.layers:
        return select_layers(load_encoder(source), init.layers, f"{where}: field 'init.layers'")
    if init.num_layers:
        return truncate_layers(load_encoder(source), init.num_layers, f"{where}: field 'init.num_layers'")
    return None
