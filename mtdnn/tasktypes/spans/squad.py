"""SQuAD v1.1 JSON (Rajpurkar et al. 2016, arXiv 1606.05250) read into question-answering examples, and the
seeded carve of a file's articles into training and dev articles.

The file is ``{"version": "1.1", "data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"answer_start", "text"}]}]}]}]}``. Every answer's ``answer_start`` (a character offset into the
context) must point at its ``text``; a context must not be empty. An unlabelled file (no ``answers``) reads as
examples without answers.

Carving by article keeps every question about one article on one side, as SQuAD's own train/dev split does:
:func:`mtdnn.tasks.data.carve_articles` takes the first ``size`` articles of a seeded permutation (the same ``torch.randperm`` as
row carves of :mod:`mtdnn.tasks.data`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import DataError
from ...fileio import quote_prefix, undecodable_at


@dataclass
class Answer:
    """A gold answer: its text and the character offset where it starts in the context."""

    text: str
    start: int


@dataclass
class QAExample:
    """One question about one context; ``article`` is the 0-based index of its article in the file."""

    id: str
    question: str
    context: str
    answers: list[Answer] = field(default_factory=list)
    article: int = 0
    title: str = ""

    @property
    def label(self) -> None:
        """Examples carry no row label: a window's answer positions are found when it is tokenized."""
        return None


def _expect(value, kind: type, where: str, what: str):
    if not isinstance(value, kind):
        raise DataError(f"{where}: field '{what}': expected a {kind.__name__}, found {type(value).__name__} "
                        f"(value: {quote_prefix(value)})")
    return value


def parse_squad(document: object, source: str, task: str) -> list[QAExample]:
    """Validate a parsed SQuAD v1.1 document into examples, in file order.

    Raises:
        DataError: naming the file, task, the question id (or article and paragraph) and the field: a wrong
            structure, an empty context or question, an ``answer_start`` that does not point at its text,
            a duplicate id, or no question at all.
    """
    where = f"{source}: task '{task}'"
    _expect(document, dict, where, "(document)")
    articles = _expect(document.get("data"), list, where, "data")
    examples: list[QAExample] = []
    seen: set[str] = set()
    for a, article in enumerate(articles):
        _expect(article, dict, f"{where}, article {a}", "(article)")
        title = str(article.get("title", ""))
        paragraphs = _expect(article.get("paragraphs"), list, f"{where}, article {a} ({quote_prefix(title)})",
                             "paragraphs")
        for p, paragraph in enumerate(paragraphs):
            at = f"{where}, article {a} ({quote_prefix(title)}), paragraph {p}"
            _expect(paragraph, dict, at, "(paragraph)")
            context = _expect(paragraph.get("context"), str, at, "context")
            qas = _expect(paragraph.get("qas"), list, at, "qas")
            if not context.strip():
                ids = [quote_prefix(str(q.get("id")), 40) for q in qas if isinstance(q, dict)]
                raise DataError(f"{at} (question ids {', '.join(ids[:3]) or 'none'}): field 'context': empty context")
            for q, qa in enumerate(qas):
                _expect(qa, dict, f"{at}, question {q}", "(question)")
                qid = str(_expect(qa.get("id"), str, f"{at}, question {q}", "id"))
                here = f"{where}, question id {quote_prefix(qid)}"
                if qid in seen:
                    raise DataError(f"{here}: field 'id': duplicate question id")
                seen.add(qid)
                question = _expect(qa.get("question"), str, here, "question")
                if not question.strip():
                    raise DataError(f"{here}: field 'question': empty question")
                answers = []
                for n, answer in enumerate(_expect(qa.get("answers", []), list, here, "answers")):
                    _expect(answer, dict, here, f"answers[{n}]")
                    text = _expect(answer.get("text"), str, here, f"answers[{n}].text")
                    start = answer.get("answer_start")
                    if isinstance(start, bool) or not isinstance(start, int):
                        raise DataError(f"{here}: field 'answers[{n}].answer_start': expected an integer character "
                                        f"offset (value: {quote_prefix(start)})")
                    if not text.strip():
                        raise DataError(f"{here}: field 'answers[{n}].text': empty answer text")
                    if not 0 <= start < len(context):
                        raise DataError(f"{here}: field 'answers[{n}].answer_start': {start} is outside the context "
                                        f"({len(context)} characters)")
                    if context[start:start + len(text)] != text:
                        found = context[start:start + len(text)]
                        raise DataError(f"{here}: field 'answers[{n}].answer_start': {start} does not point at the "
                                        f"answer text {quote_prefix(text)} (the context there reads "
                                        f"{quote_prefix(found)})")
                    answers.append(Answer(text, start))
                examples.append(QAExample(qid, question, context, answers, a, title))
    if not examples:
        raise DataError(f"{where}: no questions (expected SQuAD v1.1 JSON: data -> paragraphs -> qas)")
    return examples


def read_squad(path: Path, task: str, encoding: str = "utf-8-sig") -> list[QAExample]:
    """Read and validate a SQuAD v1.1 JSON file (see :func:`parse_squad`).

    Raises:
        DataError: the file is not UTF-8 JSON, or see :func:`parse_squad`.
    """
    try:
        document = json.loads(Path(path).read_text(encoding=encoding))
    except UnicodeDecodeError:
        raise DataError(f"{path}: {undecodable_at(path, encoding)}: task '{task}': not valid {encoding} "
                        "text") from None
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: line {err.lineno}: task '{task}': not valid JSON ({err.msg})") from None
    return parse_squad(document, str(path), task)


def article_titles(examples: list[QAExample]) -> list[str]:
    """The titles of the articles the examples come from, in file order, each once."""
    return list(dict.fromkeys(ex.title for ex in examples))
