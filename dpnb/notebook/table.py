"""A table shown as HTML in notebooks and as aligned text elsewhere."""
from __future__ import annotations

import html

from .labels import label, width


class Table:
    """Rows under a header; ``_repr_html_`` for Jupyter, ``str`` for terminals and logs.
    The header shows in the language ``dpnb.set_language`` chose."""

    def __init__(self, header: list[str], rows: list[list], title: str = ""):
        self.header = list(header)
        self.rows = [list(r) for r in rows]
        self.title = title

    def __str__(self) -> str:
        cells = [[label(h) for h in self.header]] + [[str(c) for c in r] for r in self.rows]
        widths = [max(width(row[i]) for row in cells) for i in range(len(self.header))]
        lines = ["  ".join(c + " " * (w - width(c)) for c, w in zip(row, widths)).rstrip()
                 for row in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        if self.title:
            lines.insert(0, self.title)
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(label(h))}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
                       for r in self.rows)
        caption = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class ShownAsTable:
    """Mixin for results that display through their ``table()``: HTML in notebooks,
    aligned text in terminals and in IPython's pretty printer."""

    def table(self) -> Table:
        raise NotImplementedError

    def __repr__(self) -> str:
        return str(self.table())

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))
