"""``mtdnn.predict`` for the token-level task types: entities in raw text, answers to questions about a context.

Sequence labelling: raw text is split into words by the encoder's own pre-tokenizer
(:func:`mtdnn.tasks.token_features.pre_tokenize`; for BERT's WordPiece, whitespace and punctuation), each word
keeps its character offsets; a word's tag is the argmax at its first piece. Entities are read from the tags
as the metrics read them (:func:`mtdnn.modeling.entity_metrics.entities`, conlleval rules) and given with the
character offsets of their first and last word. Rows of a split (``--split``) are words already: their
offsets are those of the words joined by single spaces.

Extractive QA: each question and context is cut into windows exactly as training's data are, and the answer
is the best span over all windows (:func:`mtdnn.modeling.span_decoding.decode_spans`), with its character
offsets into the context and the ``n_best`` list.

Raw input (``--text``, ``--input``): for sequence labelling one text (a tsv line, or a JSON object with
``text``); for extractive QA a question and a context (two tab-separated fields, or JSON ``question`` and
``context``). Output: ``jsonl`` (one object per sentence or question) or ``tsv`` (``id``, ``prediction``: the
entities as ``type:start-end`` or the answer text, then ``start`` and ``end`` for answers).
"""

from __future__ import annotations

import json

import torch

from ..errors import DataError
from ..modeling.entity_metrics import entities
from ..modeling.span_decoding import decode_spans
from ..tasks.conll import TaggedSentence
from ..tasks.data import TokenizedSplit
from ..tasks.squad import QAExample
from ..tasks.taskdef import TaskDef
from ..tasks.token_features import pre_tokenize, word_predictions
from .predict import raw_rows, read_lines


def raw_columns(task: TaskDef) -> list[str]:
    """The fields of one raw example: ``text`` (sequence labelling) or ``question``, ``context`` (QA)."""
    return ["text"] if task.type == "sequence_labelling" else ["question", "context"]


def raw_records(lines: list[str], source: str, task: TaskDef, fmt: str) -> list[dict]:
    """Raw examples ``{"id", field: text}`` from tsv or jsonl lines (blank lines skipped; see
    :func:`mtdnn.evaluation.predict.raw_rows`).

    Raises:
        DataError: naming ``source`` and the 1-based line: a wrong number of fields, invalid JSON, a missing
            key, an empty text or context, or no example at all.
    """
    columns, records = raw_columns(task), []
    for _, where, row_id, fields in raw_rows(lines, source, task, columns, fmt):
        for column, field in zip(columns, fields):
            if not field.strip():
                raise DataError(f"{where}, field '{column}': empty {column}")
        records.append({"id": row_id, **dict(zip(columns, fields))})
    return records


def read_raw(args, task: TaskDef) -> list[dict]:
    """The raw examples of ``--text`` or ``--input`` (a file or ``-``).

    Raises:
        DataError: see :func:`raw_records`; ``--text`` with the wrong number of texts; an unreadable input.
    """
    columns = raw_columns(task)
    if args.text:
        if len(args.text) != len(columns):
            raise DataError(f"--text: task '{task.name}' takes {len(columns)} text(s) ({', '.join(columns)}), "
                            f"got {len(args.text)}")
        return raw_records(["\t".join(args.text)], "--text", task, "tsv")
    lines, source, fmt = read_lines(args.input, args.input_format)
    return raw_records(lines, source, task, fmt)


# ------------------------------------------------------------------------------------------------ predicting


def tag_sentences(task: TaskDef, split: TokenizedSplit, outputs: torch.Tensor,
                  words: list[list[tuple[str, int, int]]], texts: list[str]) -> list[dict]:
    """Per sentence: its words with their predicted tags and character offsets, and its entities.

    Args:
        outputs: ``(n, seq_len, tags)`` tag logits of the split's rows.
        words: per row, ``(word, start, end)`` character offsets into the row's text.
        texts: per row, the text (an entity's ``text`` is its slice).
    """
    labels = task.labels or []
    rows = []
    for i, pieces in enumerate(outputs.argmax(-1).tolist()):
        row_words = words[i]
        tags = [labels[t] for t in word_predictions(pieces, split.features["word_ids"][i], len(row_words),
                                                    labels.index("O"))]
        found = sorted(entities(tags), key=lambda e: e[1])
        rows.append({"id": split.ids[i],
                     "tokens": [{"word": w, "start": s, "end": e, "tag": t} for (w, s, e), t in zip(row_words, tags)],
                     "entities": [{"type": kind, "text": texts[i][row_words[a][1]:row_words[b][2]],
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
    """``jsonl`` (every field) or ``tsv`` (``id``, ``prediction``[, ``start``, ``end``])."""
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if task.type == "sequence_labelling":
        lines = ["id\tprediction"] + [r["id"] + "\t" + " ".join(f"{e['type']}:{e['start']}-{e['end']}"
                                                                for e in r["entities"]) for r in rows]
    else:
        lines = ["id\tprediction\tstart\tend"] + [f"{r['id']}\t{r['answer']}\t{r['start']}\t{r['end']}" for r in rows]
    return "\n".join(lines) + "\n"


def predict_token_task(args, loaded, task: TaskDef, device: str) -> tuple[str, int]:
    """What ``mtdnn.predict`` writes for a token-level task: ``(text, rows)``.

    Raises:
        ConfigError: ``--format glue``.
        DataError: see :func:`read_raw` and :func:`mtdnn.tasks.data.tokenized_split`.
    """
    from ..errors import ConfigError
    from ..tasks.data import load_split, tokenize_examples
    from ..training.inference import predict_outputs

    fmt = args.format or "jsonl"
    if fmt == "glue":
        raise ConfigError(f"--format glue: task '{task.name}' is a {task.type} task; use jsonl or tsv")
    if args.split is not None:
        examples = load_split(task, args.split, loaded.resolve_data_dir(args.data_dir)).examples
    else:
        records = read_raw(args, task)
        if task.type == "sequence_labelling":
            examples = [TaggedSentence(r["id"], n + 1, [w for w, _, _ in pre_tokenize(r["text"], loaded.tokenizer)])
                        for n, r in enumerate(records)]
            offsets = [pre_tokenize(r["text"], loaded.tokenizer) for r in records]
            texts = [r["text"] for r in records]
        else:
            examples = [QAExample(r["id"], r["question"], r["context"]) for r in records]
    if task.type == "sequence_labelling" and args.split is not None:
        offsets, texts = [], [" ".join(ex.words) for ex in examples]
        for ex in examples:
            starts = [sum(len(w) + 1 for w in ex.words[:k]) for k in range(len(ex.words))]
            offsets.append([(w, s, s + len(w)) for w, s in zip(ex.words, starts)])
    empty = [ex.id for ex in examples if task.type == "sequence_labelling" and not ex.words]
    if empty:
        raise DataError(f"task '{task.name}': input {empty[0]} has no words")
    for ex in examples:  # labels are not used in prediction
        if task.type == "sequence_labelling":
            ex.tags = None
        else:
            ex.answers = []
    split = tokenize_examples(examples, task, loaded.tokenizer, loaded.max_length)
    outputs = predict_outputs(loaded.model.to(device), task, split, loaded.tokenizer.pad_token_id or 0,
                              args.batch_size or loaded.eval_batch_size, loaded.pad_to_multiple_of, device=device)
    if task.type == "sequence_labelling":
        rows = tag_sentences(task, split, outputs, offsets, texts)
    else:
        rows = answer_questions(task, split, outputs)
    return format_rows(task, rows, fmt), len(rows)
