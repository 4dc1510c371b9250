"""The one Markdown-table helper (mtdnn.tables) and the tables written through it."""

import pytest

from mtdnn.tables import markdown_row, markdown_table


def test_markdown_table_writes_header_rule_and_rows():
    assert markdown_table(["a", "b"], [["1", "2"], ["x", ""]], align="lr") == [
        "| a | b |", "|---|---:|", "| 1 | 2 |", "| x |  |"]
    assert markdown_table(["a"], []) == ["| a |", "|---|"]


def test_a_blank_cell_is_one_space_an_empty_string_two():
    # both spellings were written by the reports before the helper; kept so that they stay byte-identical
    assert markdown_row(["**overall**", None, None, "0.5"]) == "| **overall** | | | 0.5 |"
    assert markdown_row(["**average**", "", "0.5"]) == "| **average** |  | 0.5 |"


def test_markdown_table_refuses_an_alignment_of_another_width():
    with pytest.raises(ValueError, match="one 'l' or 'r' per column"):
        markdown_table(["a", "b"], [], align="l")
    with pytest.raises(ValueError):
        markdown_table(["a"], [], align="c")


def test_the_teacher_reports_disagreement_table_of_one_member_has_as_many_cells_as_columns():
    """With one member there is no pair: the table written before the helper had a header of two cells ("| task |  |")
    over a rule of one column; now every line has the rule's one column."""
    from mtdnn.distillation.teacher_report import render_markdown

    report = {"tasks": {"rte": {"metric": "accuracy", "members": [{"score": 0.6}], "mean": 0.6, "std": 0.0,
                                "ensemble": {"score": 0.6}, "disagreement": {"pairs": []}}},
              "average": {"members": [0.6], "mean": 0.6, "std": 0.0, "ensemble": 0.6}}
    lines = render_markdown(report, "t").splitlines()
    table = lines[lines.index("| task |"):lines.index("| task |") + 3]
    assert table == ["| task |", "|---|", "| rte |"]
