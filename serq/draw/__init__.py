"""`serq draw`: the deployment as an SVG picture, read from the linked IR (architecture), with the
source text its locations name for printing expressions and naming gateways, which the IR expands.

The picture has two bands: the path a session takes, left to right (path.py), and the deployment
its statements name, in the order the path first reaches each part (deploy.py), with a legend.
"""
from __future__ import annotations

from serq.draw.deploy import deployment
from serq.draw.path import path_band
from serq.draw.route import routes
from serq.draw.svg import Canvas, Legend, Text, stack
from serq.draw.text import Source, reading
from serq.ir import model as I


def svg(prog: I.Program, title: str = "", sources: list[str | None] | None = None) -> str:
    """The picture of `prog` as SVG text: the same program (and source) gives the same bytes.
    Expressions print as the source wrote them: `sources`, the text of each of `prog.files`, or
    by default those files as they are now (one that cannot be read: the IR's own rendering)."""
    source = Source(prog, sources)
    with reading(source):
        rs = routes(prog, source)
        bands = []
        if title:
            bands.append(Text(title, size=15, bold=True))
        bands.append(path_band(prog, rs))
        bands.append(deployment(prog, rs))
        bands.append(Legend({"gateway"} if rs else set()))
        c = Canvas()
        stack(bands, gap=26).place(c, 20, 20)
    return c.render()
