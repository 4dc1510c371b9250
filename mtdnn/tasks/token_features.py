"""Tokenization of token-level tasks: word labels aligned to word pieces, and question-answering windows.

Sequence labelling (as Devlin et al. 2019, arXiv 1810.04805 section 5.3, and Hugging Face ``run_ner``): the
words are tokenized with ``is_split_into_words=True``; a word's tag goes on its first piece and every other
piece (further pieces of the word, special tokens) gets :data:`IGNORE` (-100, the ``ignore_index`` of
``cross_entropy``). ``word_ids`` maps each piece back to its word (-1 for special tokens), so that predictions
can be read per word; a word that yields no piece (a zero-width character) has no prediction and is read as
``O``. A word beyond ``max_length`` has no labelled piece: dev scoring leaves it out of gold and prediction alike,
as Hugging Face ``run_ner`` does, and ``mtdnn.predict`` tags a long text in chunks of whole words instead.

Extractive QA (BERT's SQuAD recipe, Hugging Face ``run_qa``): question and context are one pair, the context
truncated (``only_second``) into overlapping windows of at most ``max_length`` pieces, consecutive windows
sharing ``doc_stride`` pieces (the ``stride`` of the fast tokenizer). Each window keeps the character offsets of
its context pieces (``offset_start``/``offset_end``, -1 outside the context: question and special tokens, found
with ``sequence_ids``) and, when labelled, the piece positions of the first gold answer, or (0, 0) (the first
token) when the answer is not wholly inside the window. Questions longer than :func:`max_question_pieces` are
cut so that every window keeps room for the context.

These columns are computed once per split and stored in the tokenized-split cache with ``input_ids``.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import DataError
from .conll import TaggedSentence
from .squad import QAExample

IGNORE = -100


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


def max_question_pieces(max_length: int, doc_stride: int) -> int:
    """The longest question kept: 64 pieces (BERT's ``max_query_length``), less when windows are short, so
    that a window always has more context pieces than the stride."""
    return max(1, min(64, max_length - doc_stride - 4))


def _cut_questions(questions: list[str], tokenizer, limit: int) -> list[str]:
    enc = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True, return_attention_mask=False)
    cut = []
    for question, offsets in zip(questions, enc["offset_mapping"]):
        cut.append(question[:offsets[limit - 1][1]] if len(offsets) > limit else question)
    return cut


def stride_fits(max_length: int, doc_stride: int) -> bool:
    """Whether a window of ``max_length`` pieces holds the stride, a question and the special tokens:
    ``0 <= doc_stride < max_length - 8``."""
    return 0 <= doc_stride < max_length - 8


def check_window_settings(max_length: int, doc_stride: int, task: str) -> None:
    """Raises DataError unless ``0 <= doc_stride`` and a window holds the stride and a question."""
    if not stride_fits(max_length, doc_stride):
        raise DataError(f"task '{task}', field 'qa.doc_stride': {doc_stride} must be at least 0 and below "
                        f"max_length - 8 = {max_length - 8}")


def tokenize_qa(examples: Sequence[QAExample], tokenizer, max_length: int, doc_stride: int,
                task: str = "squad") -> dict[str, list]:
    """Columns of a tokenized extractive-QA split, one row per window (see the module docstring).

    Returns:
        ``id`` (``<question id>#<window>``), ``example_id`` (the question id), ``input_ids``, ``length``,
        ``token_type_ids`` when the tokenizer uses them, ``offset_start``/``offset_end`` (per piece, character
        offsets into the context, -1 outside it), ``context`` (the question's context, so that a split
        alone suffices to cut answers); when labelled also ``label`` (``[start, end]`` piece positions of the
        first gold answer) and ``answers`` (every gold answer text, for EM/F1).

    Raises:
        DataError: ``doc_stride`` does not fit ``max_length``.
    """
    check_window_settings(max_length, doc_stride, task)
    use_types = "token_type_ids" in tokenizer.model_input_names
    questions = _cut_questions([ex.question.lstrip() for ex in examples], tokenizer,
                               max_question_pieces(max_length, doc_stride))
    enc = tokenizer(questions, [ex.context for ex in examples], truncation="only_second", max_length=max_length,
                    stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True,
                    return_attention_mask=False, return_token_type_ids=use_types)
    labelled = bool(examples) and all(ex.answers for ex in examples)
    columns: dict[str, list] = {"id": [], "example_id": [], "input_ids": enc["input_ids"], "length": [],
                                "offset_start": [], "offset_end": [], "context": []}
    if use_types:
        columns["token_type_ids"] = enc["token_type_ids"]
    if labelled:
        columns["label"], columns["answers"] = [], []
    window_of: dict[int, int] = {}
    for w, sample in enumerate(enc["overflow_to_sample_mapping"]):
        ex = examples[sample]
        k = window_of[sample] = window_of.get(sample, -1) + 1
        sequence_ids = enc.sequence_ids(w)
        starts = [s if seq == 1 else -1 for (s, _), seq in zip(enc["offset_mapping"][w], sequence_ids)]
        ends = [e if seq == 1 else -1 for (_, e), seq in zip(enc["offset_mapping"][w], sequence_ids)]
        columns["id"].append(f"{ex.id}#{k}")
        columns["example_id"].append(ex.id)
        columns["length"].append(len(enc["input_ids"][w]))
        columns["offset_start"].append(starts)
        columns["offset_end"].append(ends)
        columns["context"].append(ex.context)
        if labelled:
            first = ex.answers[0]
            columns["label"].append(list(answer_positions(starts, ends, first.start, first.start + len(first.text))))
            columns["answers"].append([a.text for a in ex.answers])
    return columns


def answer_positions(offset_start: Sequence[int], offset_end: Sequence[int], char_start: int,
                     char_end: int) -> tuple[int, int]:
    """The first and last piece of a window that cover characters ``[char_start, char_end)`` of the context, or
    ``(0, 0)`` when the answer is not wholly inside the window's context pieces."""
    inside = [i for i, s in enumerate(offset_start) if s >= 0]
    if not inside or offset_start[inside[0]] > char_start or offset_end[inside[-1]] < char_end:
        return 0, 0
    start = next(i for i in inside if offset_end[i] > char_start)
    end = next(i for i in reversed(inside) if offset_start[i] < char_end)
    return start, end
