"""Tokenization of extractive QA: question-context windows with the character offsets of their pieces.

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

from ...errors import DataError
from .squad import QAExample


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
