"""Token-level task parts: CoNLL and SQuAD readers, word-piece alignment, QA windows, seqeval-equal entity
scores, SQuAD v1.1 EM/F1, span post-processing, heads and losses."""

import json
import random
import re
import string
from collections import Counter

import pytest
import torch

from mtdnn.errors import DataError
from mtdnn.modeling.entity_metrics import EntityF1, entities, entity_scores
from mtdnn.modeling.span_decoding import decode_spans, window_best_spans
from mtdnn.modeling.squad_metrics import exact_match, f1, normalize_answer, squad_scores
from mtdnn.modeling.token_heads import (SpanExtractionHead, TokenClassificationHead, span_cross_entropy,
                                        token_cross_entropy_per_piece,
                                        span_distillation_loss, token_cross_entropy, token_distillation_loss)
from mtdnn.tasks.data import carve_articles
from mtdnn.tasks.rows import IGNORE
from mtdnn.tasktypes.spans.features import answer_positions, tokenize_qa
from mtdnn.tasktypes.spans.squad import parse_squad, read_squad
from mtdnn.tasktypes.tagging.conll import check_tag_set, read_conll
from mtdnn.tasktypes.tagging.features import align_labels, pre_tokenize, tokenize_sentences, word_predictions

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


# ------------------------------------------------------------------------------------------------- CoNLL


def test_conll_space_separated_with_docstart_and_chosen_tag_column(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\nPeter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n"
                    "BRUSSELS NNP B-NP B-LOC\n1996-08-22 CD I-NP O\n\n\n", encoding="utf-8")
    sentences = read_conll(path, ["token", "pos", "chunk", "ner"], "token", "ner", TAGS, "conll")
    assert [s.words for s in sentences] == [["Peter", "Blackburn"], ["BRUSSELS", "1996-08-22"]]
    assert [s.tags for s in sentences] == [[1, 2], [3, 0]]
    assert [s.line for s in sentences] == [3, 6] and [s.id for s in sentences] == ["0", "1"]


def test_conll_tab_separated_with_whitespace_only_separator_lines(tmp_path):
    path = tmp_path / "wnut.conll"
    path.write_bytes(b"@paul walk\tO\nBerlin\tB-LOC\n\t\nIt\tO\r\n \nthe\tO\n")
    sentences = read_conll(path, ["token", "tag"], "token", "tag", TAGS, "wnut")
    assert [s.words for s in sentences] == [["@paul walk", "Berlin"], ["It"], ["the"]]
    assert sentences[0].tags == [0, 3]


def test_conll_unlabelled_file_has_no_tags(tmp_path):
    path = tmp_path / "test.txt"
    path.write_text("a\nb\n\nc\n", encoding="utf-8")
    sentences = read_conll(path, ["token"], "token", "tag", TAGS, "t")
    assert sentences[1].words == ["c"] and sentences[0].tags is None


@pytest.mark.parametrize("content, needle", [
    ("Peter B-PER\nParis B-CITY\n", "line 2: task 'ner', field 'tag': tag 'B-CITY' is not in the task's tag set"),
    ("Peter B-PER\nParis\n", "line 2: task 'ner': expected 2 fields (token, tag), found 1"),
    ("", "no sentences"),
])
def test_conll_bad_input_names_line_field_and_value(tmp_path, content, needle):
    path = tmp_path / "bad.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_conll(path, ["token", "tag"], "token", "tag", TAGS, "ner")
    assert needle in str(err.value) and str(path) in str(err.value)


def test_bio_tag_set_check():
    check_tag_set(TAGS)
    for bad, needle in ((["B-PER", "I-PER"], "'O'"), (["O", "B-PER"], "'I-PER' is missing"),
                        (["O", "PER"], "not BIO")):
        with pytest.raises(ValueError, match=needle):
            check_tag_set(bad)


# ------------------------------------------------------------------------------------------------- SQuAD


def squad_doc(context="The cat sat on the mat.", start=4, text="cat", qid="q1"):
    return {"version": "1.1", "data": [{"title": "Cats", "paragraphs": [
        {"context": context, "qas": [{"id": qid, "question": "Who sat?",
                                      "answers": [{"answer_start": start, "text": text}]}]}]}]}


def test_squad_reads_examples_and_rejects_bad_offsets_and_empty_context(tmp_path):
    examples = parse_squad(squad_doc(), "f.json", "squad")
    assert examples[0].answers[0].text == "cat" and examples[0].title == "Cats"
    with pytest.raises(DataError, match=r"question id 'q1': field 'answers\[0\].answer_start': 5 does not point at "
                                        r"the answer text 'cat' \(the context there reads 'at '\)"):
        parse_squad(squad_doc(start=5), "f.json", "squad")
    with pytest.raises(DataError, match=r"paragraph 0 \(question ids 'q1'\): field 'context': empty context"):
        parse_squad(squad_doc(context="  "), "f.json", "squad")
    with pytest.raises(DataError, match=r"question id 'q1': field 'answers\[0\].answer_start': -1 is outside the "
                                        r"context \(\d+ characters\)"):
        parse_squad(squad_doc(start=-1), "f.json", "squad")
    with pytest.raises(DataError, match=r"question id 'q1': field 'answers\[0\].text': empty answer text"):
        parse_squad(squad_doc(text=""), "f.json", "squad")
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"data": [\n  {"title": "caf\xe9"}]}')
    with pytest.raises(DataError, match="latin1.json: line 2, byte 17 of the line: task 'squad': not valid"):
        read_squad(path, "squad")
    path = tmp_path / "broken.json"
    path.write_text('{"data": [\n  {"title": }', encoding="utf-8")
    with pytest.raises(DataError, match="line 2: task 'squad': not valid JSON"):
        read_squad(path, "squad")


def test_article_carve_is_seeded_and_sized():
    dev = carve_articles(38, 8, seed=0)
    assert dev == carve_articles(38, 8, seed=0) and len(set(dev)) == 8 and dev != carve_articles(38, 8, seed=1)
    with pytest.raises(DataError, match="carve.size"):
        carve_articles(5, 5, 0)


# ------------------------------------------------------------------------------------------------- alignment


def test_word_labels_go_on_the_first_piece(tokenizer):
    from mtdnn.tasktypes.tagging.conll import TaggedSentence

    sentence = TaggedSentence("0", 1, ["Peter", "Blackburnish", "\u200b", "lives"], [1, 2, 0, 0])
    columns = tokenize_sentences([sentence], tokenizer, max_length=32)
    pieces = tokenizer.convert_ids_to_tokens(columns["input_ids"][0])
    assert pieces == ["[CLS]", "peter", "blackburn", "##ish", "lives", "[SEP]"]  # the zero-width word has no piece
    assert columns["piece_labels"][0] == [IGNORE, 1, 2, IGNORE, 0, IGNORE] and columns["label"][0] == [1, 2, 0, 0]
    assert columns["word_ids"][0] == [-1, 0, 1, 1, 3, -1]
    # predictions are read on first pieces; the word without a piece is predicted O (id 0)
    assert word_predictions([9, 1, 2, 7, 3, 9], columns["word_ids"][0], 4, outside=0) == [1, 2, 0, 3]
    assert align_labels([None, 0, 0, 0, 1, None], [4, 3]) == [IGNORE, 4, IGNORE, IGNORE, 3, IGNORE]


class PieceEcho(torch.nn.Module):
    """A stand-in model whose tag logits depend on each piece alone: the tag is the piece's id modulo 5."""

    def forward(self, task, input_ids, attention_mask, token_type_ids=None):
        return torch.nn.functional.one_hot(input_ids % len(TAGS), len(TAGS)).float()


def test_predict_tags_every_word_of_a_sentence_longer_than_max_length(tokenizer):
    """mtdnn.predict cuts a long sentence into consecutive chunks of whole words that each fit in max_length
    pieces and joins their tags; a word longer than max_length alone is a chunk of its own (cut)."""
    from types import SimpleNamespace

    from mtdnn.evaluation.token_predict import tag_words, word_chunks
    from mtdnn.tasks.taskdef import parse_tasks

    long_word = "zqxjkvbwfg" * 9  # 90 characters, more pieces than max_length
    words = ("Peter Blackburn lives in Berlin . " * 6).split() + [long_word] + "Anna went to Paris".split()
    max_length = 12
    assert len(tokenizer(long_word, add_special_tokens=False)["input_ids"]) > max_length
    [ranges] = word_chunks([words], tokenizer, max_length)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(words) and len(ranges) > 3
    assert all(a < b and b == c for (a, b), (c, _) in zip(ranges, ranges[1:]))  # consecutive, none empty
    for a, b in ranges:
        pieces = len(tokenizer(words[a:b], is_split_into_words=True)["input_ids"])
        assert pieces <= max_length or (b - a == 1 and words[a] == long_word), (a, b, pieces)
        if b < len(words) and words[b] != long_word:  # each chunk is as long as fits
            assert len(tokenizer(words[a:b + 1], is_split_into_words=True)["input_ids"]) > max_length
    assert word_chunks([words[:5]], tokenizer, max_length) == [[(0, 5)]]  # a short sentence is one chunk

    task = parse_tasks({"tasks": {"ner": {"type": "sequence_labelling", "text": ["t"], "label": "g", "labels": TAGS,
                                          "splits": {"dev": {"path": "x", "format": "conll", "columns": ["t", "g"]}}}}},
                       "mem")["ner"]
    loaded = SimpleNamespace(tokenizer=tokenizer, max_length=max_length, model=PieceEcho(), eval_batch_size=4,
                             pad_to_multiple_of=1)
    [tags] = tag_words(task, [words], loaded, None, "cpu")
    first_pieces = [ids[0] for ids in tokenizer(words, add_special_tokens=False)["input_ids"]]
    assert tags == [TAGS[i % len(TAGS)] for i in first_pieces]  # every word from its own first piece, past the cut too
    assert len(set(tags[-10:])) > 1


def test_pre_tokenize_gives_words_with_character_offsets(tokenizer):
    text = "Mr. Bidén visited  U.S. troops"
    words = pre_tokenize(text, tokenizer)
    assert [w for w, _, _ in words] == ["Mr", ".", "Bidén", "visited", "U", ".", "S", ".", "troops"]
    assert all(text[s:e] == w for w, s, e in words)


def test_windows_with_an_answer_across_a_window_edge(tokenizer):
    from mtdnn.tasktypes.spans.squad import Answer, QAExample

    words = [f"w{i}" for i in range(120)]
    context = " ".join(words)
    answer = "w30 w31 w32 w33"
    start = context.index(answer)
    ex = QAExample("q", "where is it?", context, [Answer(answer, start)])
    columns = tokenize_qa([ex], tokenizer, max_length=48, doc_stride=16)
    n = len(columns["id"])
    assert n > 3 and columns["id"][:2] == ["q#0", "q#1"] and set(columns["example_id"]) == {"q"}
    assert all(length <= 48 for length in columns["length"])
    inside = [w for w in range(n) if columns["label"][w][0] != 0]
    crossing = [w for w in range(n) if min(s for s in columns["offset_start"][w] if s >= 0) < start + len(answer)
                and max(columns["offset_end"][w]) > start and w not in inside]
    assert inside and crossing  # one window holds the answer; another window's edge cuts through it
    for w in inside:
        i, j = columns["label"][w]
        assert context[columns["offset_start"][w][i]:columns["offset_end"][w][j]] == answer
    for w in crossing:
        assert columns["label"][w] == [0, 0]
    assert columns["answers"][0] == [answer] and columns["context"][-1] == context
    # consecutive windows share doc_stride context pieces
    ctx = [[p for p, s in zip(columns["input_ids"][w], columns["offset_start"][w]) if s >= 0] for w in range(n)]
    assert ctx[0][-16:] == ctx[1][:16]


def test_limits_and_counts_of_a_windowed_split_are_questions(tokenizer):
    """--limit-*-examples keeps every window of the first N questions; evaluate counts questions, not windows."""
    from mtdnn.tasks.tokenized import TokenizedSplit
    from mtdnn.tasktypes.spans.squad import Answer, QAExample

    long_context = " ".join(f"w{i}" for i in range(120))
    examples = [QAExample(q, "where is it?", long_context if q != "b" else "w1 w2 w3", [Answer("w1", 0)])
                for q in ("a", "b", "c")]
    split = TokenizedSplit.from_columns("squad", "dev", tokenize_qa(examples, tokenizer, max_length=48, doc_stride=16))
    windows_of_a = split.features["example_id"].count("a")
    assert windows_of_a > 3 and split.num_examples == 3 and len(split) == 2 * windows_of_a + 1
    head = split.head(2)
    assert head.features["example_id"] == ["a"] * windows_of_a + ["b"] and head.num_examples == 2
    assert split.head(10).num_examples == 3


def test_answer_positions_inside_and_outside():
    starts, ends = [-1, 0, 4, 8, -1], [-1, 3, 7, 12, -1]
    assert answer_positions(starts, ends, 4, 12) == (2, 3)
    assert answer_positions(starts, ends, 4, 13) == (0, 0)


# ------------------------------------------------------------------------------------------------- entity scores


def seqeval_scores(gold, pred):
    from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score

    return {"precision": precision_score(gold, pred), "recall": recall_score(gold, pred), "f1": f1_score(gold, pred),
            "accuracy": accuracy_score(gold, pred)}


@pytest.mark.parametrize("gold, pred", [
    ([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]]),
    ([["O", "B-PER", "I-PER", "O", "B-LOC"]], [["O", "I-PER", "I-PER", "O", "B-LOC"]]),      # ill-formed, still right
    ([["O", "B-PER", "O"], ["B-LOC"]], [["O", "I-PER", "O"], ["O"]]),                          # O I-PER
    ([["B-PER", "I-PER"]], [["B-PER", "I-LOC"]]),                                              # type switch
    ([["B-PER", "I-PER", "I-PER"]], [["B-PER", "B-PER", "I-PER"]]),
    ([["O", "O"]], [["O", "O"]]),                                                              # nothing to find
    ([["I-LOC", "I-PER", "B-PER"]], [["I-LOC", "I-LOC", "B-PER"]]),
])
def test_entity_scores_equal_seqeval_on_hand_made_cases(gold, pred):
    assert entity_scores(gold, pred) == pytest.approx(seqeval_scores(gold, pred), abs=1e-12)


def test_ill_formed_o_i_sequence_is_an_entity():
    assert entities(["O", "I-PER", "I-PER", "O"]) == {("PER", 1, 2)}
    assert entities(["B-PER", "I-LOC"]) == {("PER", 0, 0), ("LOC", 1, 1)}


def test_entity_scores_equal_seqeval_on_random_sequences():
    rng = random.Random(0)
    tags = TAGS + ["B-MISC", "I-MISC"]
    gold = [[rng.choice(tags) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    pred = [[t if rng.random() < 0.7 else rng.choice(tags) for t in g] for g in gold]
    expected = seqeval_scores(gold, pred)
    assert entity_scores(gold, pred) == pytest.approx(expected, abs=1e-12)
    metric = EntityF1()
    for s in range(0, 300, 64):
        metric.update(gold[s:s + 64], pred[s:s + 64])
    assert {k: float(v) for k, v in metric.compute().items()} == pytest.approx(expected, abs=1e-12)


# ------------------------------------------------------------------------------------------------- SQuAD metrics


def official_normalize_answer(s):  # SQuAD v1.1 evaluate-v1.1.py, verbatim logic
    def remove_articles(text):
        return re.sub(r'\b(a|an|the)\b', ' ', text)

    def white_space_fix(text):
        return ' '.join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return ''.join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def official_f1_score(prediction, ground_truth):
    prediction_tokens = official_normalize_answer(prediction).split()
    ground_truth_tokens = official_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def official_exact_match_score(prediction, ground_truth):
    return official_normalize_answer(prediction) == official_normalize_answer(ground_truth)


def official_evaluate(dataset, predictions):
    f1_total = exact = total = 0
    for article in dataset:
        for paragraph in article['paragraphs']:
            for qa in paragraph['qas']:
                total += 1
                if qa['id'] not in predictions:
                    continue
                ground_truths = list(map(lambda x: x['text'], qa['answers']))
                prediction = predictions[qa['id']]
                exact += max(official_exact_match_score(prediction, gt) for gt in ground_truths)
                f1_total += max(official_f1_score(prediction, gt) for gt in ground_truths)
    return {'exact_match': 100.0 * exact / total, 'f1': 100.0 * f1_total / total}


def test_squad_normalisation_and_scores_on_hand_made_cases():
    assert normalize_answer("The  Cat, sat!") == "cat sat"
    assert normalize_answer("an apple a day") == "apple day"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert normalize_answer("The") == ""
    assert exact_match("The", "the") == 1.0 and f1("The", "the") == 0.0  # empty after normalisation
    assert f1("The", "Denver Broncos") == 0.0 and exact_match("The", "Denver Broncos") == 0.0
    assert f1("Denver Broncos team", "the Denver Broncos") == pytest.approx(0.8)
    scores = squad_scores({"a": "Denver", "b": "1990s"}, {"a": ["Denver Broncos", "denver"], "b": ["the 1980s"],
                                                         "c": ["x"]})
    assert scores == pytest.approx({"exact_match": 100 / 3, "f1": 100 / 3})


def test_an_answer_that_normalises_to_nothing_scores_f1_0_as_in_squad_v1_1():
    """Why the toolkit keeps its own SQuAD EM/F1: evaluate-v1.1.py gives prediction "a" against gold "The" (both
    empty after normalisation) exact match 100 and F1 0 (no shared word); torchmetrics' SQuAD follows v2.0's
    script, where two empty answers score F1 100."""
    assert squad_scores({"q": "a"}, {"q": ["The"]}) == {"exact_match": 100.0, "f1": 0.0}
    from torchmetrics.functional.text import squad as torchmetrics_squad

    theirs = torchmetrics_squad([{"prediction_text": "a", "id": "q"}],
                                [{"answers": {"answer_start": [0], "text": ["The"]}, "id": "q"}])
    assert float(theirs["f1"]) == 100.0  # the v2.0 rule this test documents; ours stays v1.1's


def test_build_metrics_gives_a_qa_task_one_span_metric_for_em_and_f1():
    from types import SimpleNamespace

    from mtdnn.modeling.metrics import build_metrics
    from mtdnn.modeling.token_metrics import SpanScores

    task = SimpleNamespace(metric_names=["squad_f1", "exact_match"], qa_spec=SimpleNamespace(n_best=5,
                                                                                             max_answer_length=10))
    metrics = build_metrics(task)
    assert [type(m) for m in metrics.values()] == [SpanScores] and metrics.order == ["squad_f1", "exact_match"]
    assert next(iter(metrics.values())).keys == ("squad_f1", "exact_match")
    with pytest.raises(ValueError, match="expected one or both"):
        SpanScores(("accuracy",))


@pytest.mark.data
def test_squad_scores_equal_the_official_logic_on_50_real_questions(data_dir):
    dataset = json.loads((data_dir / "squad" / "dev-v1.1-articles-00-37.json").read_text(encoding="utf-8"))["data"]
    examples = parse_squad({"data": dataset}, "squad", "squad")
    rng = random.Random(7)
    chosen = rng.sample(examples, 50)
    predictions = {}
    for n, ex in enumerate(chosen):  # spans of the real contexts near the gold answer: exact, longer, shorter, off
        a = ex.answers[n % len(ex.answers)]
        shift = [0, 0, -6, 5, 12, -15, 0, 40][n % 8]
        start = max(0, a.start + shift)
        end = max(start + 1, a.start + len(a.text) + [0, 8, 0, -2, 3, 0, -len(a.text) + 1, 30][n % 8])
        predictions[ex.id] = ex.context[start:end]
    predictions[chosen[0].id] = "The"  # normalises to empty
    subset = [{"paragraphs": [{"qas": [{"id": ex.id, "answers": [{"text": x.text} for x in ex.answers]}]}]}
              for ex in chosen]
    expected = official_evaluate(subset, predictions)
    got = squad_scores(predictions, {ex.id: [x.text for x in ex.answers] for ex in chosen})
    assert got == pytest.approx(expected, abs=1e-9)
    assert 0 < got["exact_match"] < 100 and 0 < got["f1"] < 100
    for ex in chosen:
        golds = [x.text for x in ex.answers]
        assert max(f1(predictions[ex.id], g) for g in golds) == max(official_f1_score(predictions[ex.id], g)
                                                                   for g in golds)


# ------------------------------------------------------------------------------------------------- post-processing


def brute_force(start, end, context, max_len):
    best = None
    for i in range(len(start)):
        for j in range(i, min(len(start), i + max_len)):
            if context[i] and context[j] and (best is None or start[i] + end[j] > best[0]):
                best = (start[i] + end[j], i, j)
    return best


def test_window_best_spans_equal_brute_force():
    g = torch.Generator().manual_seed(0)
    start, end = torch.randn(6, 40, generator=g), torch.randn(6, 40, generator=g)
    context = torch.zeros(6, 40, dtype=torch.bool)
    context[:, 10:35] = True
    context[5] = False
    scores, starts, ends = window_best_spans(start, end, context, n_best=5, max_answer_length=7, chunk=4)
    for w in range(5):
        best = brute_force(start[w].tolist(), end[w].tolist(), context[w].tolist(), 7)
        assert (starts[w, 0].item(), ends[w, 0].item()) == best[1:]
        assert scores[w, 0].item() == pytest.approx(best[0])
        assert (scores[w, :-1] >= scores[w, 1:]).all()
    assert torch.isinf(scores[5]).all()


def test_decode_spans_takes_the_best_window_and_character_offsets():
    context = "Alpha beta gamma delta"
    offsets = ([-1, 0, 6, 11, -1], [-1, 5, 10, 16, -1]), ([-1, 6, 11, 17, -1], [-1, 10, 16, 22, -1])
    start = [torch.tensor([9.0, 1.0, 0.0, 0.0, 9.0]), torch.tensor([0.0, 0.0, 3.0, 0.0, 0.0])]
    end = [torch.tensor([9.0, 1.0, 0.0, 0.0, 9.0]), torch.tensor([0.0, 0.0, 0.0, 3.0, 0.0])]
    predicted = decode_spans(start, end, [o[0] for o in offsets], [o[1] for o in offsets], ["q", "q"],
                             {"q": context}, n_best=3, max_answer_length=5)["q"]
    assert (predicted.text, predicted.start, predicted.end) == ("gamma delta", 11, 22)
    assert len(predicted.n_best) == 3 and predicted.n_best[0]["probability"] > predicted.n_best[1]["probability"]
    short = decode_spans(start, end, [o[0] for o in offsets], [o[1] for o in offsets], ["q", "q"],
                         {"q": context}, n_best=3, max_answer_length=1)["q"]
    assert short.text in ("gamma", "delta", "Alpha")  # spans of one piece only
    assert short.end - short.start <= 5


# ------------------------------------------------------------------------------------------------- heads, losses


def test_heads_shapes_and_padding_mask():
    hidden, mask = torch.randn(2, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    assert TokenClassificationHead(8, 4)(hidden, mask).shape == (2, 5, 4)
    logits = SpanExtractionHead(8)(hidden, mask)
    assert logits.shape == (2, 5, 2) and (logits[0, 3:] == -1e4).all() and (logits[1] > -1e4).all()


def test_token_losses_ignore_unlabelled_pieces_and_weight_zero_rows():
    logits = torch.randn(2, 4, 3, requires_grad=True)
    labels = torch.tensor([[IGNORE, 1, IGNORE, 2], [IGNORE, 0, 0, IGNORE]])
    loss = token_cross_entropy(logits, labels, torch.tensor([1.0, 0.0]), 1.0)
    expected = torch.nn.functional.cross_entropy(logits[0, [1, 3]], torch.tensor([1, 2]))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    loss.backward()
    assert logits.grad[0, 0].abs().sum() == 0 and logits.grad[1].abs().sum() == 0


def test_per_piece_token_loss_is_the_batch_mean_over_labelled_pieces():
    """run_ner's reduction: every labelled piece of the batch weighs the same (not every sentence)."""
    logits = torch.randn(3, 5, 4, requires_grad=True)
    labels = torch.tensor([[IGNORE, 1, IGNORE, IGNORE, IGNORE], [IGNORE, 0, 2, 3, 1], [IGNORE, 2, 2, IGNORE, IGNORE]])
    flat = torch.nn.functional.cross_entropy(logits[:2].reshape(-1, 4), labels[:2].reshape(-1), ignore_index=IGNORE)
    weight = torch.tensor([1.0, 1.0, 0.0])  # the third row a DDP padding copy
    loss = token_cross_entropy_per_piece(logits, labels, weight, 2.0)
    assert loss.item() == pytest.approx(flat.item(), rel=1e-6)
    per_sentence = token_cross_entropy(logits, labels, weight, 2.0)
    assert abs(per_sentence.item() - loss.item()) > 1e-4  # 1 piece and 4 pieces: the two reductions differ
    loss.backward()
    assert logits.grad[2].abs().sum() == 0 and logits.grad[0, 0].abs().sum() == 0
    # two accumulated batches (normaliser: both batches' examples): the mean of the two batch means
    a = token_cross_entropy_per_piece(logits[:1], labels[:1], torch.ones(1), 2.0)
    b = token_cross_entropy_per_piece(logits[1:2], labels[1:2], torch.ones(1), 2.0)
    first = torch.nn.functional.cross_entropy(logits[0, [1]], labels[0, [1]])
    second = torch.nn.functional.cross_entropy(logits[1, 1:], labels[1, 1:])
    assert (a + b).item() == pytest.approx(((first + second) / 2).item(), rel=1e-6)


def test_span_loss_and_distillation_losses():
    logits = torch.randn(3, 6, 2)
    positions = torch.tensor([[1, 2], [0, 0], [4, 5]])
    w = torch.ones(3)
    expected = (torch.nn.functional.cross_entropy(logits[..., 0], positions[:, 0])
                + torch.nn.functional.cross_entropy(logits[..., 1], positions[:, 1])) / 2
    assert span_cross_entropy(logits, positions, w, 3.0).item() == pytest.approx(expected.item(), rel=1e-6)
    # alpha = 0: the gold loss; a teacher equal to a one-hot target at alpha = 1, T = 1: the gold loss again
    assert span_distillation_loss(logits, logits.unsqueeze(1), positions, w, 3.0, alpha=0.0).item() == \
        pytest.approx(expected.item(), rel=1e-6)
    onehot = torch.full((3, 1, 6, 2), -1e4)
    for b in range(3):
        onehot[b, 0, positions[b, 0], 0] = onehot[b, 0, positions[b, 1], 1] = 0.0
    assert span_distillation_loss(logits, onehot, positions, w, 3.0, alpha=1.0).item() == \
        pytest.approx(expected.item(), rel=1e-5)
    # per-token: soft targets equal to the student's own distribution give the entropy's gradient 0
    student = torch.randn(2, 4, 3, requires_grad=True)
    labels = torch.tensor([[1, 2, IGNORE, 0], [0, IGNORE, IGNORE, 1]])
    loss = token_distillation_loss(student, student.detach().unsqueeze(1).repeat(1, 2, 1, 1), labels,
                                   torch.ones(2), 2.0, temperature=2.0, alpha=1.0)
    loss.backward()
    assert student.grad.abs().max() < 1e-6


# ------------------------------------------------------------------------------------------------- batches, metrics


class Rows:
    """A tokenized split's items and features, as the data module serves them."""

    def __init__(self, columns):
        self.columns = columns
        self.features = {k: v for k, v in columns.items() if k not in ("id", "input_ids", "length", "label")}

    def __len__(self):
        return len(self.columns["id"])

    def __getitem__(self, i):
        return {"idx": i, **{k: v[i] for k, v in self.columns.items() if k not in ("id", "length")}}


def tagging_split(tokenizer):
    from mtdnn.tasktypes.tagging.conll import TaggedSentence

    sentences = [TaggedSentence("0", 1, ["Peter", "Blackburnish", "lives"], [1, 2, 0]),
                 TaggedSentence("1", 5, ["in", "Brussels"], [0, 3])]
    return Rows(tokenize_sentences(sentences, tokenizer, max_length=32))


def test_tagging_batch_and_scores_from_logits(tokenizer):
    from mtdnn.modeling.token_metrics import TaggingScores
    from mtdnn.tasktypes.tagging.batches import first_piece_tags
    from mtdnn.tasktypes.tagging.batches import collate_tagging

    split = tagging_split(tokenizer)
    batch = collate_tagging([split[0], split[1]], "ner", tokenizer.pad_token_id)
    assert batch.labels.shape == batch.input_ids.shape
    assert batch.labels[1].tolist()[:4] == [IGNORE, 0, 3, IGNORE]
    # logits that predict the gold piece labels, except that "Brussels" is tagged I-LOC (ill-formed O I-LOC)
    logits = torch.zeros(*batch.labels.shape, 5)
    for (row, col), label in zip((batch.labels != IGNORE).nonzero().tolist(),
                                 batch.labels[batch.labels != IGNORE].tolist()):
        logits[row, col, 4 if label == 3 else label] = 5.0
    logits[0, 3, 0] = 9.0  # a second piece ("##ish") predicts O: not scored
    predicted, gold = first_piece_tags(logits, batch.labels, batch.weight)
    assert gold == [[1, 2, 0], [0, 3]] and predicted == [[1, 2, 0], [0, 4]]
    expected = seqeval_scores([["B-PER", "I-PER", "O"], ["O", "B-LOC"]], [["B-PER", "I-PER", "O"], ["O", "I-LOC"]])
    for key, name in TaggingScores.KEYS.items():
        metric = TaggingScores(TAGS, key)
        metric.update(predicted, gold)
        assert float(metric.compute()) == pytest.approx(expected[name])
    assert expected["f1"] == 1.0 and expected["accuracy"] == 0.8  # conlleval reads O I-LOC as a LOC entity
    # a weight-0 row (DDP padding copy) is left out
    assert first_piece_tags(logits, batch.labels, torch.tensor([1.0, 0.0]))[1] == [[1, 2, 0]]


def qa_split(tokenizer, max_length=40, doc_stride=12):
    from mtdnn.tasktypes.spans.squad import Answer, QAExample

    words = [f"w{i}" for i in range(60)]
    context = " ".join(words)
    examples = [QAExample("a", "where?", context, [Answer("w40 w41", context.index("w40 w41"))]),
                QAExample("b", "what?", "short context here", [Answer("context", 6)])]
    return Rows(tokenize_qa(examples, tokenizer, max_length, doc_stride))


def oracle_logits(batch):
    logits = torch.zeros(*batch.input_ids.shape, 2).masked_fill(batch.attention_mask.unsqueeze(-1) == 0, -1e4)
    for row, (s, e, _) in enumerate(batch.labels.tolist()):
        if s:
            logits[row, s, 0] = logits[row, e, 1] = 8.0
    return logits


def test_span_scores_over_windows_in_separate_batches(tokenizer):
    from mtdnn.modeling.token_metrics import SpanScores
    from mtdnn.tasktypes.spans.batches import collate_spans

    split = qa_split(tokenizer)
    assert len(split) >= 3
    metric = SpanScores(("exact_match",), n_best=5, max_answer_length=10).attach(split)
    for w in range(len(split)):  # one window per batch
        batch = collate_spans([split[w]], "squad", tokenizer.pad_token_id)
        assert batch.labels[0, 2] == w
        metric.update(oracle_logits(batch), batch.labels, batch.weight)
    predictions = metric.predictions()
    assert predictions["a"].text == "w40 w41" and predictions["b"].text == "context"
    assert float(metric.compute()["exact_match"]) == 1.0 and metric.decoded["a"].text == "w40 w41"


@pytest.mark.parametrize("count", [1, None])
def test_span_scores_gather_every_window_across_more_ranks_than_windows(tmp_path, tokenizer, tiny_encoder, count):
    """2 gloo processes; with count=1 there is one dev window for two ranks, so rank 1 scores nothing."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from mtdnn.modeling.token_metrics import SpanScores
    from mtdnn.tasktypes.spans.batches import collate_spans

    split = qa_split(tokenizer)
    count = count or len(split)
    single = SpanScores(("exact_match", "squad_f1"), n_best=5, max_answer_length=10).attach(split)
    for w in range(count):
        batch = collate_spans([split[w]], "squad", tokenizer.pad_token_id)
        single.update(oracle_logits(batch), batch.labels, batch.weight)
    expected = {key: float(v) for key, v in single.compute().items()}
    worker = Path(__file__).with_name("span_ddp_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[1])}
    procs = [subprocess.Popen([sys.executable, str(worker), str(r), "2", str(tmp_path / "init"), tiny_encoder,
                               str(tmp_path / f"rank{r}.json"), str(count)], env=env, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-2000:]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert results[0] == results[1]  # every rank decodes every window
    assert results[0]["scores"] == pytest.approx(expected)
    if count == 1:  # only window 0 (question "a", answer in a later window) was scored: a wrong span
        assert expected["exact_match"] == 0.0
    else:
        assert expected == {"exact_match": 1.0, "squad_f1": 1.0}
