"""Parsing quirks, malformed rows, tokenization and the tokenized-split cache."""

import json
from pathlib import Path

import pytest

from mtdnn.tasks import data as data_mod
from mtdnn.tasks.collate import collate
from mtdnn.tasks.data import load_split
from mtdnn.tasks.tokenized import tokenized_split
from mtdnn.errors import DataError
from mtdnn.tasks.taskdef import parse_tasks


def task(**overrides):
    body = {
        "type": "classification",
        "splits": {"train": {"path": "train.tsv"}},
        "text": ["premise", "hypothesis"],
        "label": "label",
        "labels": ["entailment", "not_entailment"],
    }
    body.update(overrides)
    return parse_tasks({"tasks": {"t": body}}, "mem")["t"]


def write_bytes(tmp_path: Path, content: bytes, name="train.tsv") -> Path:
    (tmp_path / name).write_bytes(content)
    return tmp_path


def test_crlf_bom_trailing_blank_lines_and_stray_quotes(tmp_path):
    content = ("\ufeffpremise\thypothesis\tlabel\r\n"
               'He said "hi.\tA "quoted" word\tentailment\r\n'
               "NA\tn/a\tnot_entailment\r\n"
               "\r\n\r\n").encode("utf-8")
    raw = load_split(task(), "train", write_bytes(tmp_path, content))
    assert [ex.text_a for ex in raw.examples] == ['He said "hi.', "NA"]
    assert raw.examples[0].text_b == 'A "quoted" word' and raw.examples[1].text_b == "n/a"
    assert [ex.label for ex in raw.examples] == [0, 1]
    assert [ex.line for ex in raw.examples] == [2, 3]


def test_integer_labels_map_to_label_order(tmp_path):
    raw = load_split(task(), "train", write_bytes(tmp_path, b"premise\thypothesis\tlabel\na\tb\t1\nc\td\t0\n"))
    assert [ex.label for ex in raw.examples] == [1, 0]


def test_headerless_file_with_columns_and_id_column(tmp_path):
    t = task(splits={"train": {"path": "train.tsv", "header": False, "columns": ["id", "premise", "hypothesis", "label"],
                               "id": "id"}})
    raw = load_split(t, "train", write_bytes(tmp_path, b"x7\ta\tb\tentailment\n"))
    assert raw.examples[0].id == "x7" and raw.examples[0].text_a == "a"


def test_csv_quoting_with_embedded_newline_reports_physical_lines(tmp_path):
    t = task(splits={"train": {"path": "train.tsv", "quoting": "csv"}})
    content = b'premise\thypothesis\tlabel\n"two\nlines"\tb\tentailment\nc\td\tbogus\n'
    with pytest.raises(DataError) as err:
        load_split(t, "train", write_bytes(tmp_path, content))
    assert "line 4" in str(err.value) and "'bogus'" in str(err.value)


@pytest.mark.parametrize(
    "row, field, value",
    [
        (b"a\tb\n", "row", "found 2 fields"),
        (b"a\tb\tneutral\n", "label", "'neutral'"),
        (b"a\tb\t7\n", "label", "'7'"),
    ],
)
def test_malformed_rows_name_file_physical_line_field_and_value(tmp_path, row, field, value):
    content = b"premise\thypothesis\tlabel\n\nok\tok\tentailment\n" + row
    with pytest.raises(DataError) as err:
        load_split(task(), "train", write_bytes(tmp_path, content))
    message = str(err.value)
    assert str(tmp_path / "train.tsv") in message
    assert "line 4" in message  # physical: header, blank line, one good row, then the bad one
    assert f"field '{field}'" in message and value in message and "task 't'" in message


@pytest.mark.parametrize("score", [b"high", b"nan", b"NaN", b"inf"])
def test_regression_rejects_non_numeric_and_nan_scores(tmp_path, score):
    t = task(type="regression", labels=None, label="score")
    content = b"premise\thypothesis\tscore\na\tb\t4.5\na\tb\t" + score + b"\n"
    with pytest.raises(DataError, match="line 3.*field 'score'"):
        load_split(t, "train", write_bytes(tmp_path, content))


def test_on_malformed_skip_logs_and_skips(tmp_path, caplog):
    content = b"premise\thypothesis\tlabel\na\tb\tentailment\nbad\trow\n c\td\tnope\ne\tf\tnot_entailment\n"
    raw = load_split(task(on_malformed="skip"), "train", write_bytes(tmp_path, content))
    assert [ex.text_a for ex in raw.examples] == ["a", "e"]
    assert sum("skipping malformed row" in r.message for r in caplog.records) == 2


def test_missing_file_missing_column_and_empty_split(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_split(task(), "train", tmp_path)
    with pytest.raises(DataError, match="column 'hypothesis' is not in the file"):
        load_split(task(), "train", write_bytes(tmp_path, b"premise\tlabel\na\tentailment\n"))
    with pytest.raises(DataError, match="no rows"):
        load_split(task(), "train", write_bytes(tmp_path, b"premise\thypothesis\tlabel\n\n"))
    with pytest.raises(DataError, match="no split 'dev'"):
        load_split(task(), "dev", tmp_path)


def test_unlabelled_test_split_and_jsonl(tmp_path):
    t = task(splits={"train": {"path": "train.jsonl", "format": "jsonl"}, "test": {"path": "test.tsv"}})
    rows = [{"premise": "a", "hypothesis": "b", "label": "entailment"}, {"premise": "c", "hypothesis": "d", "label": 1}]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    (tmp_path / "test.tsv").write_text("premise\thypothesis\nx\ty\n")
    assert [ex.label for ex in load_split(t, "train", tmp_path).examples] == [0, 1]
    test = load_split(t, "test", tmp_path)
    assert not test.labelled and test.examples[0].label is None


def test_carved_split_is_seeded_and_disjoint(tmp_path):
    lines = "".join(f"p{i}\th{i}\tentailment\n" for i in range(50))
    write_bytes(tmp_path, ("premise\thypothesis\tlabel\n" + lines).encode())
    t = task(splits={"train": {"path": "train.tsv"}, "dev": {"carve": {"from_split": "train", "size": 10, "seed": 3}}})
    dev, train = load_split(t, "dev", tmp_path), load_split(t, "train", tmp_path)
    assert len(dev.examples) == 10 and len(train.examples) == 40
    assert not {e.text_a for e in dev.examples} & {e.text_a for e in train.examples}
    assert [e.text_a for e in load_split(t, "dev", tmp_path).examples] == [e.text_a for e in dev.examples]


def test_pair_tokenization_has_segment_ids_and_truncates(tmp_path, tokenizer):
    content = b"premise\thypothesis\tlabel\nthe cat sat\ta dog ran fast\tentailment\n" + \
        b"premise\thypothesis\tlabel\n".replace(b"premise\thypothesis\tlabel", b"word " * 100 + b"\tb\tentailment")
    split = tokenized_split(task(max_length=16), "train", write_bytes(tmp_path, content), tokenizer)
    ids, types = split.input_ids[0], split.token_type_ids[0]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens == ["[CLS]", "the", "cat", "sat", "[SEP]", "a", "dog", "ran", "fast", "[SEP]"]
    assert types == [0] * 5 + [1] * 5
    assert len(split.input_ids[1]) == 16 and split.lengths == [10, 16]


def test_collate_pads_dynamically_and_masks(tokenizer, tmp_path):
    write_bytes(tmp_path, b"premise\thypothesis\tlabel\na\tb\tentailment\nlonger premise here\tand more\t1\n")
    t = task()
    split = tokenized_split(t, "train", tmp_path, tokenizer)
    batch = collate([split[0], split[1]], t, tokenizer.pad_token_id, pad_to_multiple_of=8)
    assert batch.input_ids.shape == (2, 8)
    assert batch.attention_mask.sum(1).tolist() == split.lengths
    assert batch.labels.tolist() == [0, 1] and batch.task == "t"


def test_ranking_tokenizes_each_candidate(tokenizer, tmp_path):
    t = parse_tasks({"tasks": {"r": {"type": "ranking", "splits": {"train": {"path": "train.tsv"}},
                                     "text": ["claim", "reason"], "candidates": ["w0", "w1"], "label": "y"}}}, "m")["r"]
    write_bytes(tmp_path, b"claim\treason\tw0\tw1\ty\nc\tr\tone\ttwo words\t1\n")
    split = tokenized_split(t, "train", tmp_path, tokenizer)
    assert len(split.input_ids[0]) == 2 and split.labels == [1]
    batch = collate([split[0]], t, tokenizer.pad_token_id)
    assert batch.input_ids.shape[0] == 2 and batch.labels.tolist() == [1]


def test_cache_is_reused_and_invalidated_by_edits(tmp_path, tokenizer, monkeypatch):
    write_bytes(tmp_path, b"premise\thypothesis\tlabel\na\tb\tentailment\n")
    first = tokenized_split(task(), "train", tmp_path, tokenizer)
    calls = []
    original = data_mod._read_table
    monkeypatch.setattr(data_mod, "_read_table", lambda *a: calls.append(1) or original(*a))
    again = tokenized_split(task(), "train", tmp_path, tokenizer)
    assert calls == [] and again.input_ids == first.input_ids  # served from the cache, not re-parsed
    tokenized_split(task(max_length=8), "train", tmp_path, tokenizer)
    assert calls == [1]  # another max length is another cache entry
    write_bytes(tmp_path, b"premise\thypothesis\tlabel\na b c\tb\tentailment\n")
    edited = tokenized_split(task(), "train", tmp_path, tokenizer)
    assert calls == [1, 1] and edited.input_ids != first.input_ids


@pytest.mark.data
def test_real_glue_files_load_with_official_counts(data_dir):
    from mtdnn.tasks.taskdef import load_task_defs

    tasks = load_task_defs(Path(__file__).resolve().parents[1] / "task_defs" / "glue.yaml")
    expected = {("cola", "train"): 8551, ("mrpc", "train"): 3668, ("mrpc", "dev"): 408, ("stsb", "dev"): 1500,
                ("rte", "train"): 2490, ("rte", "test"): 3000, ("snli", "dev"): 9842, ("snli", "train"): 1666,
                ("qqp", "dev"): 2000, ("qqp", "train"): 23497 - 1 - 2000, ("scitail", "test"): 2126}
    for (name, split), count in expected.items():
        assert len(load_split(tasks[name], split, data_dir).examples) == count, (name, split)


def test_wrong_or_unknown_encoding_is_a_clear_error(tmp_path):
    write_bytes(tmp_path, "premise\thypothesis\tlabel\ncaf\u00e9\tb\tentailment\n".encode("latin-1"))
    with pytest.raises(DataError, match="not valid utf-8-sig text.*'encoding'"):
        load_split(task(), "train", tmp_path)
    t = task(splits={"train": {"path": "train.tsv", "encoding": "latin-1"}})
    assert load_split(t, "train", tmp_path).examples[0].text_a == "caf\u00e9"
    t = task(splits={"train": {"path": "train.tsv", "encoding": "klingon"}})
    with pytest.raises(DataError, match="unknown encoding 'klingon'"):
        load_split(t, "train", tmp_path)
