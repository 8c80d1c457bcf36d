"""`serq draw`: the deployment as an SVG picture, read from the linked IR only (architecture).

The picture has two bands: the path a session takes, left to right (path.py), and the deployment
its statements name, in the order the path first reaches each part (deploy.py), with a legend.
"""
from __future__ import annotations

from serq.draw.deploy import deployment
from serq.draw.path import path_band
from serq.draw.svg import Canvas, Legend, Text, stack
from serq.ir import model as I


def svg(prog: I.Program, title: str = "") -> str:
    """The picture of `prog` as SVG text: the same program gives the same bytes."""
    bands = []
    if title:
        bands.append(Text(title, size=15, bold=True))
    bands.append(path_band(prog))
    bands.append(deployment(prog))
    bands.append(Legend())
    c = Canvas()
    stack(bands, gap=26).place(c, 20, 20)
    return c.render()
