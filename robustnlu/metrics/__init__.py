"""SLU evaluation metrics (core paper section 5.1 and Appendix D)."""

from robustnlu.metrics.slu import (
    SLUMetrics,
    SlotErrors,
    UtteranceCounts,
    semer_slot_errors,
    utterance_counts,
)

__all__ = [
    "SLUMetrics",
    "SlotErrors",
    "UtteranceCounts",
    "semer_slot_errors",
    "utterance_counts",
]
