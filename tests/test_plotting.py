"""A figure as PNG bytes (robustnlu/plotting.py): the same figure gives the same bytes, whatever
matplotlib wrote them, at the size its dpi asks."""

from __future__ import annotations

import struct

from robustnlu.plotting import png


def _figure():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3.0, 2.0))
    fig.add_subplot(1, 1, 1).plot([0, 1, 2], [1, 0, 2])
    return fig


def _chunks(data: bytes) -> list[bytes]:
    """The chunk types of a PNG, in file order."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    types, i = [], 8
    while i < len(data):
        (length,) = struct.unpack(">I", data[i:i + 4])
        types.append(data[i + 4:i + 8])
        i += 12 + length
    return types


def test_the_same_figure_gives_the_same_bytes_without_the_matplotlib_version():
    first, again = png(_figure()), png(_figure())
    assert first == again
    assert b"tEXt" not in _chunks(first) and b"Matplotlib" not in first


def test_dpi_sets_the_pixel_size():
    for dpi, size in ((100, (300, 200)), (110, (330, 220))):
        data = png(_figure(), dpi=dpi)
        assert struct.unpack(">II", data[16:24]) == size  # IHDR: width, height
