"""The Hugging Face reference of the token-level tasks: a plain ``transformers`` ``Trainer`` fine-tune, as the
``run_ner`` and ``run_qa`` examples do it, on examples read by the toolkit's readers and scored by its metric code.

- Sequence labelling (``run_ner``): ``AutoModelForTokenClassification``; the words tokenized with
  ``is_split_into_words=True`` and truncated to ``max_length``; each word's tag on its first piece, -100 on every
  other piece and on special tokens; ``DataCollatorForTokenClassification``. Dev: the argmax tag of each
  labelled piece, scored entity by entity with :func:`mtdnn.modeling.entity_metrics.entity_scores` (equal to
  ``seqeval``'s default mode, which ``run_ner`` reports).
- Extractive QA (``run_qa``): ``AutoModelForQuestionAnswering``; the question (left-stripped) and the context as
  a pair, the context cut into windows of ``max_length`` pieces sharing ``doc_stride`` pieces
  (``truncation="only_second"``, ``return_overflowing_tokens``); a window's start/end positions are the first
  gold answer's pieces, or the [CLS] position when the answer is not wholly inside it. Dev: ``run_qa``'s
  ``postprocess_qa_predictions`` (the ``n_best`` highest start and end logits of each window paired, spans
  outside the context, reversed or longer than ``max_answer_length`` pieces skipped, the best score over all
  windows of a question), scored with :func:`mtdnn.modeling.squad_metrics.squad_scores` (SQuAD v1.1's EM/F1).
  ``run_qa`` has no ``max_query_length``: questions are not cut (the toolkit cuts them at 64 pieces; no SQuAD
  question of the data root is that long).

Optimisation as the toolkit's ``TrainConfig``: AdamW (the ``Trainer``'s default, no weight decay on biases and
LayerNorm weights), linear warm-up over ``int(warmup_ratio * total steps)`` steps then linear decay, gradient
clipping at 1.0, fp32, one seed. The dev set is scored after every epoch and the best epoch (by F1) is reported,
as the toolkit selects its best epoch on dev.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import asdict, dataclass

import numpy as np

IGNORE = -100


@dataclass
class ReferenceSettings:
    """The hyper-parameters both arms share (the toolkit's ``TrainConfig`` names)."""

    encoder: str
    epochs: int
    lr: float
    batch_size: int
    eval_batch_size: int
    warmup_ratio: float
    weight_decay: float
    gradient_clip: float
    max_length: int
    seed: int
    accelerator: str = "auto"
    doc_stride: int = 64
    n_best: int = 20
    max_answer_length: int = 30
    limit_train_examples: int | None = None
    limit_eval_examples: int | None = None


# ------------------------------------------------------------------------------------------ sequence labelling


def tagging_features(sentences, tokenizer, max_length: int) -> dict[str, list]:
    """``run_ner``'s ``tokenize_and_align_labels``: ``input_ids`` (and the mask, types) plus ``labels``, the tag
    on each word's first piece and -100 elsewhere."""
    enc = tokenizer([s.words for s in sentences], is_split_into_words=True, truncation=True, max_length=max_length)
    labels = []
    for i, sentence in enumerate(sentences):
        previous, row = None, []
        for word in enc.word_ids(i):
            row.append(IGNORE if word is None or word == previous else sentence.tags[word])
            previous = word
        labels.append(row)
    return {**enc, "labels": labels}


def tagging_scores(logits: np.ndarray, labels: np.ndarray, tag_names: list[str]) -> dict[str, float]:
    """Entity precision, recall, F1 (percent) of the argmax tags of the labelled pieces.

    Args:
        logits: ``(sentences, pieces, tags)``; labels: ``(sentences, pieces)``, -100 where unscored (the
            ``Trainer`` pads both across batches with -100).
    """
    from mtdnn.modeling.entity_metrics import entity_scores

    predicted_ids = logits.argmax(-1)
    gold, predicted = [], []
    for p_row, g_row in zip(predicted_ids, labels):
        keep = g_row != IGNORE
        gold.append([tag_names[t] for t in g_row[keep]])
        predicted.append([tag_names[t] for t in p_row[keep]])
    scores = entity_scores(gold, predicted)
    return {"f1": 100 * scores["f1"], "precision": 100 * scores["precision"], "recall": 100 * scores["recall"]}


# ------------------------------------------------------------------------------------------- extractive QA


def qa_features(examples, tokenizer, settings: ReferenceSettings) -> dict[str, list]:
    """``run_qa``'s ``prepare_train_features`` (positions) with ``prepare_validation_features``'s bookkeeping:
    ``example_id`` per window and ``offset_mapping`` with None outside the context."""
    enc = tokenizer([ex.question.lstrip() for ex in examples], [ex.context for ex in examples],
                    truncation="only_second", max_length=settings.max_length, stride=settings.doc_stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True)
    starts, ends, example_ids, offsets = [], [], [], []
    for w, sample in enumerate(enc.pop("overflow_to_sample_mapping")):
        ex = examples[sample]
        sequence_ids = enc.sequence_ids(w)
        window_offsets = [o if s == 1 else None for o, s in zip(enc["offset_mapping"][w], sequence_ids)]
        cls = enc["input_ids"][w].index(tokenizer.cls_token_id)
        answer = ex.answers[0]
        char_start, char_end = answer.start, answer.start + len(answer.text)
        context = [i for i, o in enumerate(window_offsets) if o is not None]
        if window_offsets[context[0]][0] > char_start or window_offsets[context[-1]][1] < char_end:
            start = end = cls
        else:
            start = next(i for i in context if window_offsets[i][1] > char_start)
            end = next(i for i in reversed(context) if window_offsets[i][0] < char_end)
        starts.append(start)
        ends.append(end)
        example_ids.append(ex.id)
        offsets.append(window_offsets)
    enc.pop("offset_mapping")
    return {**enc, "start_positions": starts, "end_positions": ends, "example_id": example_ids, "offsets": offsets}


def postprocess_qa(start_logits: np.ndarray, end_logits: np.ndarray, example_ids: list[str], offsets: list[list],
                   contexts: dict[str, str], n_best: int, max_answer_length: int) -> dict[str, str]:
    """``run_qa``'s ``postprocess_qa_predictions`` (SQuAD v1.1: no null answer): question id -> answer text.

    Args:
        start_logits, end_logits: ``(windows, pieces)``, padded with -100 past each window.
        offsets: per window, per piece, ``(start, end)`` character offsets or None outside the context.
    """
    best: dict[str, tuple[float, str]] = {}
    for w, qid in enumerate(example_ids):
        window = offsets[w]
        top_starts = np.argsort(start_logits[w])[-1:-n_best - 1:-1]
        top_ends = np.argsort(end_logits[w])[-1:-n_best - 1:-1]
        for i in top_starts:
            for j in top_ends:
                if i >= len(window) or j >= len(window) or window[i] is None or window[j] is None:
                    continue
                if j < i or j - i + 1 > max_answer_length:
                    continue
                score = float(start_logits[w][i] + end_logits[w][j])
                if qid not in best or score > best[qid][0]:
                    best[qid] = (score, contexts[qid][window[i][0]:window[j][1]])
    return {qid: best[qid][1] if qid in best else "" for qid in dict.fromkeys(example_ids)}


# ------------------------------------------------------------------------------------------------ the Trainer


def _train(model, tokenizer, train_columns: dict, eval_columns: dict, collator, compute_metrics,
           settings: ReferenceSettings, output_dir: str | None) -> tuple[list[dict], float]:
    """Fine-tune with a ``Trainer``, scoring dev after every epoch; returns (per-epoch scores, seconds)."""
    import datasets
    from transformers import Trainer, TrainingArguments

    model_inputs = set(tokenizer.model_input_names) | {"labels", "start_positions", "end_positions"}
    train = datasets.Dataset.from_dict({k: v for k, v in train_columns.items() if k in model_inputs})
    dev = datasets.Dataset.from_dict({k: v for k, v in eval_columns.items() if k in model_inputs})
    total_steps = settings.epochs * math.ceil(len(train) / settings.batch_size)
    history: list[dict] = []

    def scored(prediction):
        scores = compute_metrics(prediction)
        history.append({"epoch": len(history) + 1, **scores})
        return scores

    args = TrainingArguments(
        output_dir=output_dir or tempfile.mkdtemp(prefix="hf-reference-"), num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch_size, per_device_eval_batch_size=settings.eval_batch_size,
        learning_rate=settings.lr, weight_decay=settings.weight_decay, max_grad_norm=settings.gradient_clip,
        lr_scheduler_type="linear", warmup_steps=int(settings.warmup_ratio * total_steps), seed=settings.seed,
        use_cpu=settings.accelerator == "cpu", eval_strategy="epoch", save_strategy="no",
        # Without tqdm, Trainer prints each log: the loss every twentieth of the run shows progress.
        logging_strategy="steps", logging_steps=max(1, total_steps // 20),
        report_to="none", disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=dev, data_collator=collator,
                      processing_class=tokenizer, compute_metrics=scored)
    began = time.perf_counter()
    trainer.train()
    return history, time.perf_counter() - began


def _result(history: list[dict], seconds: float, train_rows: int, eval_rows: int,
            settings: ReferenceSettings) -> dict:
    best = max(history, key=lambda h: h["f1"])
    return {"f1": best["f1"], "exact_match": best.get("exact_match"), "best_epoch": best["epoch"],
            "epochs": history, "train_seconds": seconds, "train_rows": train_rows, "eval_rows": eval_rows,
            "settings": asdict(settings)}


def tagging_reference(task, train_sentences, dev_sentences, settings: ReferenceSettings,
                      output_dir: str | None = None) -> dict:
    """Fine-tune and score the ``run_ner`` reference of a sequence-labelling task (see the module docstring).

    Args:
        task: the toolkit's :class:`~mtdnn.tasks.taskdef.TaskDef` (its ``labels``).
        train_sentences, dev_sentences: :class:`~mtdnn.tasks.conll.TaggedSentence` lists (the first
            ``limit_*_examples`` are kept, as the toolkit's limits keep the first rows).

    Returns:
        ``f1`` (percent, best epoch), ``best_epoch``, per-epoch ``epochs``, ``train_seconds``, row counts.
    """
    import torch
    from transformers import AutoModelForTokenClassification, DataCollatorForTokenClassification, set_seed

    from mtdnn.modeling.model import load_tokenizer, resolve_encoder

    train_sentences = train_sentences[:settings.limit_train_examples]
    dev_sentences = dev_sentences[:settings.limit_eval_examples]
    tokenizer = load_tokenizer(settings.encoder)
    set_seed(settings.seed)
    names = list(task.labels)
    model = AutoModelForTokenClassification.from_pretrained(
        resolve_encoder(settings.encoder), num_labels=len(names), id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)}, dtype=torch.float32)
    history, seconds = _train(model, tokenizer, tagging_features(train_sentences, tokenizer, settings.max_length),
                              tagging_features(dev_sentences, tokenizer, settings.max_length),
                              DataCollatorForTokenClassification(tokenizer),
                              lambda p: tagging_scores(p.predictions, p.label_ids, names), settings, output_dir)
    return _result(history, seconds, len(train_sentences), len(dev_sentences), settings)


def qa_reference(train_examples, dev_examples, settings: ReferenceSettings, output_dir: str | None = None) -> dict:
    """Fine-tune and score the ``run_qa`` reference of SQuAD v1.1-style extractive QA (see the module docstring).

    Args:
        train_examples, dev_examples: :class:`~mtdnn.tasks.squad.QAExample` lists. The limits keep the first
            ``limit_*_examples`` windows, as the toolkit's limits keep the first rows of its window splits; a
            question is scored when at least one of its windows is kept.

    Returns:
        ``f1`` and ``exact_match`` (percent, best epoch by F1), ``best_epoch``, ``epochs``, ``train_seconds``.
    """
    import torch
    from transformers import AutoModelForQuestionAnswering, DataCollatorWithPadding, set_seed

    from mtdnn.modeling.model import load_tokenizer, resolve_encoder
    from mtdnn.modeling.squad_metrics import squad_scores

    tokenizer = load_tokenizer(settings.encoder)
    # every question yields at least one window: the first N windows come from the first N questions
    train = _first_windows(qa_features(train_examples[:settings.limit_train_examples], tokenizer, settings),
                           settings.limit_train_examples)
    dev = _first_windows(qa_features(dev_examples[:settings.limit_eval_examples], tokenizer, settings),
                         settings.limit_eval_examples)
    contexts = {ex.id: ex.context for ex in dev_examples}
    kept = set(dev["example_id"])
    gold = {ex.id: [a.text for a in ex.answers] for ex in dev_examples if ex.id in kept}

    def compute_metrics(prediction):
        start_logits, end_logits = prediction.predictions[:2]
        answers = postprocess_qa(start_logits, end_logits, dev["example_id"], dev["offsets"], contexts,
                                 settings.n_best, settings.max_answer_length)
        scores = squad_scores(answers, gold)
        return {"f1": scores["f1"], "exact_match": scores["exact_match"]}

    set_seed(settings.seed)
    model = AutoModelForQuestionAnswering.from_pretrained(resolve_encoder(settings.encoder), dtype=torch.float32)
    history, seconds = _train(model, tokenizer, train, dev, DataCollatorWithPadding(tokenizer), compute_metrics,
                              settings, output_dir)
    return _result(history, seconds, len(train["input_ids"]), len(gold), settings)


def _first_windows(columns: dict[str, list], limit: int | None) -> dict[str, list]:
    return {k: v[:limit] for k, v in columns.items()}
