"""SLU evaluation metrics (core paper section 5.1 and Appendix D)."""

from robustnlu.metrics.slu import (
    SLUMetrics,
    SlotErrors,
    UtteranceCounts,
    semer_slot_errors,
    utterance_counts,
)
from robustnlu.metrics.spans import Span, extract_spans

__all__ = [
    "SLUMetrics",
    "SlotErrors",
    "Span",
    "UtteranceCounts",
    "extract_spans",
    "semer_slot_errors",
    "utterance_counts",
]
