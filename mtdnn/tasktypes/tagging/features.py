"""Tokenization of sequence labelling: word labels aligned to word pieces, and reading predictions back per word.

Sequence labelling (as Devlin et al. 2019, arXiv 1810.04805 section 5.3, and Hugging Face ``run_ner``): the
words are tokenized with ``is_split_into_words=True``; a word's tag goes on its first piece and every other
piece (further pieces of the word, special tokens) gets :data:`IGNORE` (-100, the ``ignore_index`` of
``cross_entropy``). ``word_ids`` maps each piece back to its word (-1 for special tokens), so that predictions
can be read per word; a word that yields no piece (a zero-width character) has no prediction and is read as
``O``. A word beyond ``max_length`` has no labelled piece: dev scoring leaves it out of gold and prediction alike,
as Hugging Face ``run_ner`` does, and ``mtdnn.predict`` tags a long text in chunks of whole words instead.

These columns are computed once per split and stored in the tokenized-split cache with ``input_ids``.
"""

from __future__ import annotations

from typing import Sequence

from ...tasks.rows import IGNORE
from .conll import TaggedSentence


def align_labels(word_ids: Sequence[int | None], tags: Sequence[int]) -> list[int]:
    """Piece labels from word tags: the tag on the first piece of each word, :data:`IGNORE` elsewhere.

    Args:
        word_ids: the word of each piece (``BatchEncoding.word_ids``), None for special tokens.
        tags: one tag id per word.
    """
    labels, previous = [], None
    for word in word_ids:
        labels.append(IGNORE if word is None or word == previous else tags[word])
        previous = word
    return labels


def tokenize_sentences(sentences: Sequence[TaggedSentence], tokenizer, max_length: int) -> dict[str, list]:
    """Columns of a tokenized sequence-labelling split, one row per sentence.

    Returns:
        ``id``, ``input_ids``, ``length`` (pieces), ``token_type_ids`` when the tokenizer uses them,
        ``word_ids`` (per piece, -1 for special tokens), ``num_words``; when labelled also ``piece_labels``
        (per piece, :data:`IGNORE` except on first pieces) and ``label`` (per word, the gold tag ids).
    """
    use_types = "token_type_ids" in tokenizer.model_input_names
    enc = tokenizer([s.words for s in sentences], is_split_into_words=True, truncation=True, max_length=max_length,
                    return_attention_mask=False, return_token_type_ids=use_types)
    word_ids = [enc.word_ids(i) for i in range(len(sentences))]
    columns = {"id": [s.id for s in sentences], "input_ids": enc["input_ids"],
               "length": [len(ids) for ids in enc["input_ids"]],
               "word_ids": [[-1 if w is None else w for w in ws] for ws in word_ids],
               "num_words": [len(s.words) for s in sentences]}
    if use_types:
        columns["token_type_ids"] = enc["token_type_ids"]
    if sentences and sentences[0].tags is not None:
        columns["piece_labels"] = [align_labels(ws, s.tags) for ws, s in zip(word_ids, sentences)]
        columns["label"] = [list(s.tags) for s in sentences]
    return columns


def word_predictions(piece_predictions: Sequence[int], word_ids: Sequence[int], num_words: int,
                     outside: int) -> list[int]:
    """Per-word predictions from per-piece ones: each word's first piece; ``outside`` (the ``O`` tag) for a word
    with no piece (empty after normalisation, or cut by ``max_length``)."""
    words = [outside] * num_words
    previous = -1
    for prediction, word in zip(piece_predictions, word_ids):
        if word >= 0 and word != previous:
            words[word] = int(prediction)
        previous = word
    return words


def pre_tokenize(text: str, tokenizer) -> list[tuple[str, int, int]]:
    """Words of raw text as the encoder's own pre-tokenizer splits it: ``(word, start, end)`` character offsets.

    For BERT's WordPiece this splits on whitespace and punctuation (``U.S.`` -> ``U . S .``). The words are
    slices of ``text`` (no normalisation), so the offsets index the text as given.
    """
    pre = tokenizer.backend_tokenizer.pre_tokenizer
    if pre is None:
        pieces, position = [], 0
        for word in text.split():
            start = text.index(word, position)
            pieces.append((word, (start, start + len(word))))
            position = start + len(word)
    else:
        pieces = pre.pre_tokenize_str(text)
    words = []
    for _, (start, end) in pieces:
        word = text[start:end]
        stripped = word.lstrip()  # byte-level pre-tokenizers keep the leading space in the offsets
        start += len(word) - len(stripped)
        word = stripped.rstrip()
        if word:
            words.append((word, start, start + len(word)))
    return words
