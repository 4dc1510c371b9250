"""Tiny, randomly initialised encoders of every common family, each with a small tokenizer of the family's kind.

Independent of ``mtdnn``: the test fixtures and the per-family worker (``encoder_family_run.py``) build from here.
Everything is offline: the vocabularies are trained with the ``tokenizers`` library on a synthetic corpus
(:func:`corpus`), then wrapped as the family's own fast tokenizer class of ``transformers`` (the class a hub
checkpoint of the family loads as: its special tokens, padding side, pair template and model inputs), or as a
plain ``PreTrainedTokenizerFast`` for ModernBERT, whose hub checkpoints use that class too.

    family       tokenizer kind                model
    bert         WordPiece (lower-cased)       BertModel, with pooler
    electra      WordPiece (lower-cased)       ElectraModel, no pooler
    distilbert   WordPiece (lower-cased)       DistilBertModel, no pooler, no token types
    roberta      byte-level BPE                RobertaModel, pooler (not pre-trained in real checkpoints)
    modernbert   byte-level BPE                ModernBertModel, no pooler, no token types, local/global layers
    xlnet        Unigram (SentencePiece-like)  XLNetModel, left padding, <cls> last
    albert       Unigram (SentencePiece-like)  AlbertModel, one shared layer, pooler
    deberta-v2   Unigram (SentencePiece-like)  DebertaV2Model (v3 style: relative positions), no pooler

Every model: hidden size 32, 2 attention heads, feed-forward 64, ``NUM_LAYERS`` layers (ALBERT: one shared
layer run ``NUM_LAYERS`` times), at least 64 positions.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

FAMILIES = ("bert", "roberta", "xlnet", "albert", "distilbert", "deberta-v2", "electra", "modernbert")
NUM_LAYERS = 4
VOCAB_SIZE = 400
# ModernBERT's attention type per layer, set explicitly so that a student keeping layers [0, 3] has [full, full],
# which the default pattern (global every 3rd layer) would not give a 2-layer model.
MODERNBERT_LAYER_TYPES = ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]

_CONFIGS = {"bert": "BertConfig", "roberta": "RobertaConfig", "xlnet": "XLNetConfig", "albert": "AlbertConfig",
            "distilbert": "DistilBertConfig", "deberta-v2": "DebertaV2Config", "electra": "ElectraConfig",
            "modernbert": "ModernBertConfig"}

POSITIVE = ["good", "great", "fine", "lovely", "happy", "bright", "warm", "kind", "calm", "brave"]
NEGATIVE = ["bad", "awful", "poor", "sad", "dark", "cold", "cruel", "angry", "weak", "grim"]
NOUNS = ["film", "book", "song", "meal", "trip", "story", "game", "house", "garden", "river", "city", "teacher",
         "doctor", "child", "painter", "market", "winter", "summer", "letter", "engine"]
VERBS = ["was", "seemed", "looked", "felt", "became", "remained", "stayed", "sounded"]
FILLER = ["the", "a", "this", "that", "very", "quite", "rather", "really", "and", "but", "near", "under", "with"]


def unsupported() -> dict[str, str]:
    """Families the installed ``transformers`` lacks, with the reason (empty when all are there)."""
    import transformers

    return {f: f"transformers {transformers.__version__} has no {c}" for f, c in _CONFIGS.items()
            if not hasattr(transformers, c)}


def _sentence(rng: random.Random, mood: list[str]) -> str:
    words = [rng.choice(["the", "a", "this", "that"]), rng.choice(NOUNS), rng.choice(VERBS),
             rng.choice(["very", "quite", "rather", "really"]), rng.choice(mood)]
    if rng.random() < 0.5:
        words += [rng.choice(["near", "under", "with"]), "the", rng.choice(NOUNS)]
    return " ".join(words) + rng.choice([".", "!", ""])


def corpus(seed: int = 0, n: int = 400) -> list[str]:
    """Synthetic sentences (lower-case English words, some punctuation and capitals) to train vocabularies on."""
    rng = random.Random(seed)
    lines = [_sentence(rng, POSITIVE if i % 2 else NEGATIVE) for i in range(n)]
    return [line.capitalize() if i % 3 == 0 else line for i, line in enumerate(lines)]


def write_tasks(root: Path, seed: int = 0, train: int = 32, dev: int = 16) -> Path:
    """Two synthetic tasks as tsv files under ``root/data`` and their definitions in ``root/tasks.yaml``.

    ``polarity`` (single sentence, negative/positive by its adjective) and ``overlap`` (a pair: entailment when
    the hypothesis's noun occurs in the premise). No ``head.pooling``: the toolkit chooses it per encoder.
    Returns the task-definition path.
    """
    rng = random.Random(seed)
    data = root / "data"
    for split, n in (("train", train), ("dev", dev)):
        rows = ["sentence\tlabel"]
        for i in range(n):
            rows.append(f"{_sentence(rng, POSITIVE if i % 2 else NEGATIVE)}\t{'positive' if i % 2 else 'negative'}")
        (data / "polarity").mkdir(parents=True, exist_ok=True)
        (data / "polarity" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        rows = ["premise\thypothesis\tlabel"]
        for i in range(n):
            premise = _sentence(rng, POSITIVE + NEGATIVE)
            noun = next(w for w in premise.split() if w in NOUNS) if i % 2 else rng.choice(
                [w for w in NOUNS if w not in premise.split()])
            rows.append(f"{premise}\tthere is a {noun}\t{'entailment' if i % 2 else 'not_entailment'}")
        (data / "overlap").mkdir(parents=True, exist_ok=True)
        (data / "overlap" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    tasks = {"tasks": {
        "polarity": {"type": "classification", "text": ["sentence"], "label": "label",
                     "labels": ["negative", "positive"], "max_length": 32,
                     "splits": {"train": {"path": "polarity/train.tsv"}, "dev": {"path": "polarity/dev.tsv"}}},
        "overlap": {"type": "classification", "text": ["premise", "hypothesis"], "label": "label",
                    "labels": ["entailment", "not_entailment"], "max_length": 32,
                    "splits": {"train": {"path": "overlap/train.tsv"}, "dev": {"path": "overlap/dev.tsv"}}}}}
    path = root / "tasks.yaml"
    path.write_text(json.dumps(tasks, indent=1), encoding="utf-8")  # JSON is YAML
    return path


# ------------------------------------------------------------------------------------------------ tokenizers


def _wordpiece(family: str, texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import BertTokenizer, DistilBertTokenizer, ElectraTokenizer

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials))
    cls = {"bert": BertTokenizer, "electra": ElectraTokenizer, "distilbert": DistilBertTokenizer}[family]
    return cls(vocab=tok.get_vocab(), do_lower_case=True)


def _byte_level_bpe(family: str, texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, RobertaTokenizer

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"] if family == "roberta" else \
        ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    if family == "roberta":
        return RobertaTokenizer(vocab=model["vocab"], merges=merges)
    # ModernBERT's hub tokenizer: byte-level BPE with BERT's [CLS] A [SEP] B [SEP] template, no token types.
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", mask_token="[MASK]", padding_side="right",
                                   model_input_names=["input_ids", "attention_mask"])


def _unigram(family: str, texts: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AlbertTokenizer, DebertaV2Tokenizer, XLNetTokenizer

    specials, cls, unk = {
        "xlnet": (["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"], XLNetTokenizer, "<unk>"),
        "albert": (["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], AlbertTokenizer, "<unk>"),
        "deberta-v2": (["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"], DebertaV2Tokenizer, "[UNK]"),
    }[family]
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁")
    tok.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials,
                                                           unk_token=unk))
    vocab = [(piece, float(score)) for piece, score in json.loads(tok.to_str())["model"]["vocab"]]
    kwargs = {"unk_id": 0} if family == "xlnet" else {}
    return cls(vocab=vocab, do_lower_case=family == "albert", **kwargs)


def build_tokenizer(family: str, texts: list[str] | None = None):
    """The family's fast tokenizer with a vocabulary trained on ``texts`` (default: :func:`corpus`)."""
    texts = texts or corpus()
    if family in ("bert", "electra", "distilbert"):
        return _wordpiece(family, texts)
    if family in ("roberta", "modernbert"):
        return _byte_level_bpe(family, texts)
    return _unigram(family, texts)


# ------------------------------------------------------------------------------------------------ models


def build_config(family: str, tokenizer, num_layers: int = NUM_LAYERS):
    """A tiny configuration of ``family`` (hidden 32, 2 heads, feed-forward 64) for ``tokenizer``'s vocabulary."""
    import transformers

    vocab, pad = len(tokenizer), tokenizer.pad_token_id
    common = dict(vocab_size=vocab, pad_token_id=pad)
    bert_like = dict(hidden_size=32, num_hidden_layers=num_layers, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=64, **common)
    if family == "bert":
        return transformers.BertConfig(**bert_like)
    if family == "electra":
        return transformers.ElectraConfig(embedding_size=32, **bert_like)
    if family == "roberta":  # as RoBERTa's checkpoints: positions start after the padding index, one token type
        return transformers.RobertaConfig(**{**bert_like, "max_position_embeddings": 66}, type_vocab_size=1,
                                          bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    if family == "albert":  # one shared layer, run num_layers times
        return transformers.AlbertConfig(embedding_size=16, num_hidden_groups=1, inner_group_num=1, **bert_like)
    if family == "deberta-v2":  # DeBERTa-v3's settings: relative positions only, shared attention keys
        return transformers.DebertaV2Config(**bert_like, relative_attention=True, position_buckets=16,
                                            norm_rel_ebd="layer_norm", share_att_key=True,
                                            pos_att_type=["p2c", "c2p"], position_biased_input=False,
                                            type_vocab_size=0, max_relative_positions=-1)
    if family == "distilbert":
        return transformers.DistilBertConfig(dim=32, n_layers=num_layers, n_heads=2, hidden_dim=64,
                                             max_position_embeddings=64, **common)
    if family == "xlnet":
        return transformers.XLNetConfig(d_model=32, n_layer=num_layers, n_head=2, d_inner=64, **common,
                                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    if family == "modernbert":
        layer_types = (MODERNBERT_LAYER_TYPES * num_layers)[:num_layers]
        return transformers.ModernBertConfig(hidden_size=32, num_hidden_layers=num_layers, num_attention_heads=2,
                                             intermediate_size=64, max_position_embeddings=64, local_attention=8,
                                             layer_types=layer_types, cls_token_id=tokenizer.cls_token_id,
                                             sep_token_id=tokenizer.sep_token_id, bos_token_id=tokenizer.cls_token_id,
                                             eos_token_id=tokenizer.sep_token_id, **common)
    raise ValueError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")


def build_encoder(family: str, path: str | Path, seed: int = 0, num_layers: int = NUM_LAYERS) -> Path:
    """Save a randomly initialised tiny ``family`` encoder and its tokenizer to ``path`` (a Hugging Face folder)."""
    import torch
    from transformers import AutoModel

    path = Path(path)
    tokenizer = build_tokenizer(family)
    torch.manual_seed(seed)
    AutoModel.from_config(build_config(family, tokenizer, num_layers)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
