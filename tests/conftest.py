"""Shared fixtures: a tiny random BERT with the packaged tokenizer, the data root, an isolated cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REQUIRE_DATA = os.environ.get("MTDNN_REQUIRE_DATA") == "1"
PLUGINS = Path(__file__).parent / "plugins"
"""Test-only callbacks (fault injection, tracing), never in production code: installed here for the test process,
and by ``plugins/sitecustomize.py`` in subprocesses whose ``PYTHONPATH`` holds this directory (:data:`PLUGINS`)."""

import sys  # noqa: E402

sys.path.insert(0, str(PLUGINS))
import mtdnn_test_plugin  # noqa: E402

mtdnn_test_plugin.install()


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Tokenized-split cache in a temporary directory, so tests never see a stale cache."""
    old = os.environ.get("MTDNN_CACHE_DIR")
    os.environ["MTDNN_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("MTDNN_CACHE_DIR", None)
    else:
        os.environ["MTDNN_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real data root; skipped when absent (a failure under CI, where MTDNN_REQUIRE_DATA=1)."""
    from mtdnn.tasks.data import resolve_data_dir
    from mtdnn.errors import DataError

    try:
        path = resolve_data_dir(None)
        if (path / "glue" / "RTE" / "train.tsv").is_file():
            return path
        reason = f"{path} has no glue/RTE/train.tsv"
    except DataError as err:
        reason = str(err)
    if REQUIRE_DATA:
        pytest.fail(f"real data required (MTDNN_REQUIRE_DATA=1) but not found: {reason}")
    pytest.skip(f"real data not found ({reason}); set MTDNN_DATA_DIR to the shared data root")


def make_tiny_encoder(path: Path, dtype: torch.dtype = torch.float32, seed: int = 0) -> Path:
    """Save a randomly initialised 2-layer, hidden-32 BERT and the packaged MiniLM tokenizer to ``path``."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from mtdnn.modeling.model import resolve_encoder

    torch.manual_seed(seed)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=512)
    BertModel(config).to(dtype).save_pretrained(path)
    AutoTokenizer.from_pretrained(resolve_encoder("packaged-minilm")).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory) -> str:
    return str(make_tiny_encoder(tmp_path_factory.mktemp("tiny-bert")))


@pytest.fixture(scope="session")
def tokenizer(tiny_encoder):
    from mtdnn.modeling.model import load_tokenizer

    return load_tokenizer(tiny_encoder)
