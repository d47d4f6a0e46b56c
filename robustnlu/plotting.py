"""The one renderer of a report's figure to PNG bytes, shared by every report that draws one
(the study, the reproduction and the data-efficiency reports)."""

from __future__ import annotations

import io


def png(fig, dpi: int = 100) -> bytes:
    """``fig`` (a `matplotlib.figure.Figure`, no pyplot state) as PNG at ``dpi`` on the Agg canvas,
    to write with a report's other files (`robustnlu.io.atomic_write_files`). No metadata (no
    matplotlib version), so the same figure gives the same bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()
