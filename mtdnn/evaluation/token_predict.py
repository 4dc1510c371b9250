"""``mtdnn.predict`` for the token-level task types: entities in raw text, answers to questions about a context.

Sequence labelling: raw text is split into words by the encoder's own pre-tokenizer
(:func:`mtdnn.tasktypes.tagging.features.pre_tokenize`; for BERT's WordPiece, whitespace and punctuation), each word
keeps its character offsets; a word's tag is the argmax at its first piece. A text (or a split's sentence)
longer than the model's max length is predicted in consecutive chunks of whole words that each fit
(:func:`word_chunks`), so that every word gets a prediction; dev scoring (training, ``mtdnn.evaluate``) still
cuts a sentence at max length and leaves the words past the cut unscored, as ``run_ner`` does. Entities are
read from the tags as the metrics read them (:func:`mtdnn.modeling.entity_metrics.entities`, conlleval rules)
and given with the character offsets of their first and last word. Rows of a split (``--split``) are words
already: their offsets are those of the words joined by single spaces.

Extractive QA: each question and context is cut into windows exactly as training's data are, and the answer
is the best span over all windows (:func:`mtdnn.modeling.span_decoding.decode_spans`), with its character
offsets into the context and the ``n_best`` list.

Raw input (``--text``, ``--input``): for sequence labelling one text (a tsv line, or a JSON object with
``text``); for extractive QA a question and a context (two tab-separated fields, or JSON ``question`` and
``context``); the values of ``--text`` are taken as they are (a tab in one is text). Output: ``jsonl`` (one
object per sentence or question) or ``tsv`` (``id``, ``prediction``: the entities as ``type:start-end`` or the
answer text, then ``start`` and ``end`` for answers; a field holding a tab, a line break or a double quote is
quoted as the csv module's ``excel-tab`` dialect quotes it).
"""

from __future__ import annotations

import itertools
import json

import torch

from ..errors import ConfigError, DataError
from ..modeling.entity_metrics import entities
from ..modeling.span_decoding import decode_spans
from ..tasks.data import load_split
from ..tasks.taskdef import TaskDef
from ..tasks.tokenized import TokenizedSplit, tokenize_examples
from ..tasktypes.spans.squad import QAExample
from ..tasktypes.tagging.conll import TaggedSentence
from ..tasktypes.tagging.features import pre_tokenize, word_predictions
from ..training.inference import predict_outputs
from .predict import raw_rows, read_lines, tsv_line


def raw_columns(task: TaskDef) -> list[str]:
    """The fields of one raw example: ``text`` (sequence labelling) or ``question``, ``context`` (QA)."""
    return list(task.kind.raw_fields)


def raw_record(where: str, row_id: str, columns: list[str], fields: list[str]) -> dict:
    """One raw example ``{"id", "where", column: text}``; ``where`` names it in later messages.

    Raises:
        DataError: naming ``where`` and the field: an empty (or whitespace-only) text.
    """
    for column, field in zip(columns, fields):
        if not field.strip():
            raise DataError(f"{where}, field '{column}': empty {column}")
    return {"id": row_id, "where": where, **dict(zip(columns, fields))}


def raw_records(lines: list[str], source: str, task: TaskDef, fmt: str) -> list[dict]:
    """Raw examples (:func:`raw_record`) from tsv or jsonl lines (blank lines skipped; see
    :func:`mtdnn.evaluation.predict.raw_rows`).

    Raises:
        DataError: naming ``source`` and the 1-based line: a wrong number of fields, invalid JSON, a missing
            key, a value that is not a JSON string, an empty text or context, or no example at all.
    """
    columns = raw_columns(task)
    return [raw_record(where, row_id, columns, fields)
            for _, where, row_id, fields in raw_rows(lines, source, task, columns, fmt)]


def read_raw(args, task: TaskDef) -> list[dict]:
    """The raw examples of ``--text`` or ``--input`` (a file or ``-``).

    The values of ``--text`` are the fields themselves, taken as given: a tab inside one is text.

    Raises:
        DataError: see :func:`raw_records`; ``--text`` with the wrong number of texts or an empty one (naming
            ``--text``, the task and the field); an unreadable input.
    """
    columns = raw_columns(task)
    if args.text:
        if len(args.text) != len(columns):
            raise DataError(f"--text: task '{task.name}' takes {len(columns)} text(s) ({', '.join(columns)}), "
                            f"got {len(args.text)}")
        return [raw_record(f"--text: task '{task.name}'", "0", columns, list(args.text))]
    lines, source, fmt = read_lines(args.input, args.input_format)
    return raw_records(lines, source, task, fmt)


# ------------------------------------------------------------------------------------------------ predicting


def word_chunks(sentences: list[list[str]], tokenizer, max_length: int) -> list[list[tuple[int, int]]]:
    """Per sentence, consecutive word ranges ``[start, end)`` covering all its words, each as long as fits in
    ``max_length`` pieces with the tokenizer's special tokens (one range when the whole sentence fits).

    A word is tokenized as in training (``is_split_into_words``), so a range's pieces are the sum of its
    words'. A word longer than ``max_length`` pieces alone is a range of its own, cut as training cuts it.

    Args:
        sentences: per sentence, its words (at least one).
    Returns:
        per sentence, its ranges in order: the first starts at 0, each starts where the previous ends, the last
        ends at the number of words.
    """
    budget = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    enc = tokenizer(sentences, is_split_into_words=True, add_special_tokens=False, return_attention_mask=False,
                    return_token_type_ids=False, verbose=False)
    chunks = []
    for i, words in enumerate(sentences):
        pieces = [0] * len(words)
        for word in enc.word_ids(i):
            if word is not None:
                pieces[word] += 1
        ranges, start, used = [], 0, 0
        for w, n in enumerate(pieces):
            if used + n > budget and w > start:
                ranges.append((start, w))
                start, used = w, 0
            used += n
        chunks.append(ranges + [(start, len(words))])
    return chunks


def tag_words(task: TaskDef, sentences: list[list[str]], loaded, batch_size: int | None,
              device: str) -> list[list[str]]:
    """Per sentence, the predicted tag of each word: the argmax at the word's first piece.

    A sentence longer than the max length (the run's ``--max-length``, else the task's) is predicted in the
    consecutive chunks of :func:`word_chunks`, each alone, and their tags joined, so that every word has a
    prediction.

    Args:
        sentences: per sentence, its words (at least one).
        loaded: the model (:func:`mtdnn.training.inference.load_model`).
        batch_size: chunks per batch (None: the model's eval batch size).
    Returns:
        per sentence, one tag name per word.
    """

    max_length = loaded.max_length or task.max_length
    chunks = word_chunks(sentences, loaded.tokenizer, max_length)
    parts = [TaggedSentence(f"{i}#{k}", 0, words[a:b])
             for i, (words, ranges) in enumerate(zip(sentences, chunks)) for k, (a, b) in enumerate(ranges)]
    split = tokenize_examples(parts, task, loaded.tokenizer, max_length)
    outputs = predict_outputs(loaded.model.to(device), task, split, loaded.tokenizer.pad_token_id or 0,
                              batch_size or loaded.eval_batch_size, loaded.pad_to_multiple_of, device=device)
    labels = task.labels or []
    predicted = outputs.argmax(-1).tolist()
    tags, j = [], 0
    for ranges in chunks:  # the parts of a sentence are consecutive rows of the split
        joined = []
        for _ in ranges:
            joined += word_predictions(predicted[j], split.features["word_ids"][j], len(parts[j].words),
                                       labels.index("O"))
            j += 1
        tags.append([labels[t] for t in joined])
    return tags


def tag_sentences(ids: list[str], words: list[list[tuple[str, int, int]]], texts: list[str],
                  tags: list[list[str]]) -> list[dict]:
    """Per sentence: its words with their predicted tags and character offsets, and its entities.

    Args:
        ids: per sentence, its id.
        words: per sentence, ``(word, start, end)`` character offsets into its text.
        texts: per sentence, the text (an entity's ``text`` is its slice).
        tags: per sentence, one tag per word (:func:`tag_words`).
    """
    rows = []
    for row_id, row_words, text, row_tags in zip(ids, words, texts, tags):
        found = sorted(entities(row_tags), key=lambda e: e[1])
        rows.append({"id": row_id,
                     "tokens": [{"word": w, "start": s, "end": e, "tag": t}
                                for (w, s, e), t in zip(row_words, row_tags)],
                     "entities": [{"type": kind, "text": text[row_words[a][1]:row_words[b][2]],
                                   "start": row_words[a][1], "end": row_words[b][2]} for kind, a, b in found]})
    return rows


def answer_questions(task: TaskDef, split: TokenizedSplit, outputs: torch.Tensor) -> list[dict]:
    """Per question (in the order of its first window): the answer, its character offsets and the n-best list.

    Args:
        outputs: ``(windows, seq_len, 2)`` start and end logits of the split's windows.
    """
    f = split.features
    lengths = split.lengths
    predictions = decode_spans([outputs[w, :n, 0] for w, n in enumerate(lengths)],
                               [outputs[w, :n, 1] for w, n in enumerate(lengths)], f["offset_start"],
                               f["offset_end"], f["example_id"], dict(zip(f["example_id"], f["context"])),
                               task.qa_spec.n_best, task.qa_spec.max_answer_length)
    return [{"id": qid, "answer": p.text, "start": p.start, "end": p.end, "score": round(p.score, 4),
             "n_best": [{**b, "score": round(b["score"], 4), "probability": round(b["probability"], 6)}
                        for b in p.n_best]}
            for qid, p in predictions.items()]


def format_rows(task: TaskDef, rows: list[dict], fmt: str) -> str:
    """``jsonl`` (every field) or ``tsv`` (``id``, ``prediction``[, ``start``, ``end``]; fields quoted by
    :func:`mtdnn.evaluation.predict.tsv_line`)."""
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if task.kind.prediction_unit == "entities":
        lines = [tsv_line(["id", "prediction"])] + [
            tsv_line([r["id"], " ".join(f"{e['type']}:{e['start']}-{e['end']}" for e in r["entities"])]) for r in rows]
    else:
        lines = [tsv_line(["id", "prediction", "start", "end"])] + [
            tsv_line([r["id"], r["answer"], r["start"], r["end"]]) for r in rows]
    return "".join(lines)


def predict_token_rows(task: TaskDef, loaded, *, records: list[dict] | None = None, examples: list | None = None,
                       batch_size: int | None = None, device: str = "cpu") -> list[dict]:
    """Predictions of a token-level task, one row per raw example or split row: entities with character offsets
    (sequence labelling, :func:`tag_sentences`) or the answer with its offsets and n-best list (span extraction,
    :func:`answer_questions`). What ``mtdnn.predict`` writes and :meth:`mtdnn.TrainedModel.predict` returns.

    Args:
        records: raw examples (:func:`raw_record`: ``id``, ``where`` and the type's ``raw_fields``); or
        examples: a split's rows (:class:`~mtdnn.tasktypes.tagging.conll.TaggedSentence` words or
            :class:`~mtdnn.tasktypes.spans.squad.QAExample` questions; their answers are not used).
        batch_size: rows per batch (None: the model's eval batch size).

    Raises:
        DataError: a raw text without words (naming its ``where``).
    """
    if task.kind.prediction_unit == "entities":
        if records is None:  # a split's rows are words already: offsets into the words joined by single spaces
            ids, texts, words = [ex.id for ex in examples], [" ".join(ex.words) for ex in examples], []
            for ex in examples:
                starts = list(itertools.accumulate((len(w) + 1 for w in ex.words[:-1]), initial=0))
                words.append([(w, s, s + len(w)) for w, s in zip(ex.words, starts)])
        else:
            ids, texts = [r["id"] for r in records], [r["text"] for r in records]
            words = [pre_tokenize(text, loaded.tokenizer) for text in texts]
            for r, row_words in zip(records, words):
                if not row_words:
                    raise DataError(f"{r['where']}, field 'text': no words in {r['text']!r}")
        tags = tag_words(task, [[w for w, _, _ in row] for row in words], loaded, batch_size, device)
        return tag_sentences(ids, words, texts, tags)
    if records is not None:
        examples = [QAExample(r["id"], r["question"], r["context"]) for r in records]
    for ex in examples:  # answers are not used in prediction
        ex.answers = []
    split = tokenize_examples(examples, task, loaded.tokenizer, loaded.max_length)
    outputs = predict_outputs(loaded.model.to(device), task, split, loaded.tokenizer.pad_token_id or 0,
                              batch_size or loaded.eval_batch_size, loaded.pad_to_multiple_of, device=device)
    return answer_questions(task, split, outputs)


def predict_token_task(args, loaded, task: TaskDef, device: str) -> tuple[str, int]:
    """What ``mtdnn.predict`` writes for a token-level task: ``(text, rows)`` (the flags read here, the
    predictions by :func:`predict_token_rows`).

    Raises:
        ConfigError: ``--format glue``.
        DataError: see :func:`read_raw` and :func:`mtdnn.tasks.tokenized.tokenized_split`; a raw text without words.
    """

    fmt = args.format or "jsonl"
    if fmt == "glue":
        raise ConfigError(f"--format glue: task '{task.name}' is a {task.type} task; use jsonl or tsv")
    if args.split is not None:
        examples = load_split(task, args.split, loaded.resolve_data_dir(args.data_dir)).examples
        rows = predict_token_rows(task, loaded, examples=examples, batch_size=args.batch_size, device=device)
    else:
        rows = predict_token_rows(task, loaded, records=read_raw(args, task), batch_size=args.batch_size,
                                  device=device)
    return format_rows(task, rows, fmt), len(rows)
