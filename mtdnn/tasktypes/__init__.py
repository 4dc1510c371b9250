"""The task types, one class each, one package per family, registered by name (the ``type:`` of a task
definition) in :data:`mtdnn.tasks.types.TASK_TYPES`.

==============  =====================================================  ==========================================
package         types (classes)                                        reads
==============  =====================================================  ==========================================
``sentence``    classification, regression, ranking                   rows of tsv/csv/jsonl tables
                (:class:`~.sentence.Classification`, ...)
``mlm``         mlm (:class:`~.mlm.Mlm`)                                the text columns of any table
``tagging``     sequence_labelling (:class:`~.tagging.SequenceLabelling`)  CoNLL files
``spans``       span_extraction (:class:`~.spans.SpanExtraction`)       SQuAD v1.1 files
==============  =====================================================  ==========================================

A package holds everything about its types: definition rules, reading, tokenization (its ``__init__`` and the
modules it imports, all without torch), collation into batches and what the metrics compare (``batches``,
imported by the class's methods when first called), head outputs and decoding (methods of the class). Heads and
losses are built from :mod:`mtdnn.modeling` by the names the class lists (``heads``, ``losses``). The type
packages sit above ``modeling`` and below ``training`` in the stage order (``tests/test_layout.py``).

Adding a type: a package with its class (a subclass of :class:`mtdnn.tasks.types.TaskKind`), one line in
:data:`REGISTERED` below, its tests. :mod:`mtdnn` imports this module first, so the registry is full before
any task definition is read.
"""

from __future__ import annotations

from ..tasks.types import TASK_TYPES, register
from . import mlm, sentence, spans, tagging

REGISTERED = (
    sentence.Classification,
    sentence.Regression,
    sentence.Ranking,
    mlm.Mlm,
    tagging.SequenceLabelling,
    spans.SpanExtraction,
)
"""Every task type, in the order error messages list them."""

for _kind in REGISTERED:
    register(_kind())

__all__ = ["REGISTERED", "TASK_TYPES"]
