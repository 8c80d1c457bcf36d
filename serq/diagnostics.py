"""Diagnostics: every program error is one, printed `file:line:col: error[CODE]: message`
with the source line and a caret (architecture principle 2)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    file: str
    line: int
    col: int
    end_line: int = 0
    end_col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NOWHERE = Span("<input>", 1, 1, 1, 1)
WIDTH = 120  # the most of a source line a diagnostic shows


class SerqError(Exception):
    """The one root error of a program: a code, a message and where."""

    def __init__(self, code: str, message: str, span: Span | None = None, notes: tuple[str, ...] = ()):
        super().__init__(message)
        self.code = code
        self.message = message
        self.span = span or NOWHERE
        self.notes = notes

    def render(self, sources: dict[str, str] | None = None) -> str:
        s = self.span
        out = [f"{s}: error[{self.code}]: {self.message}"]
        text = (sources or {}).get(s.file)
        if text is None:
            try:
                with open(s.file, encoding="utf-8") as fh:
                    text = fh.read()
            except (OSError, UnicodeDecodeError, ValueError):
                text = None
        if text is not None:
            lines = text.splitlines()
            if 1 <= s.line <= len(lines):
                src = lines[s.line - 1].expandtabs(1)
                col = max(1, s.col)
                width = s.end_col - s.col if s.end_line == s.line and s.end_col > s.col else 1
                if len(src) > WIDTH:  # a long line: a window around the column
                    start = max(0, col - 1 - WIDTH // 3)
                    src = ("…" if start else "") + src[start:start + WIDTH] + ("…" if start + WIDTH < len(src) else "")
                    col = col - start + (1 if start else 0)
                width = max(1, min(width, len(src) - col + 1))
                out.append(f"  {s.line:>4} | {src}")
                out.append("       | " + " " * (col - 1) + "^" * width)
        for n in self.notes:
            out.append(f"  note: {n}")
        return "\n".join(out)


class Errors(SerqError):
    """Several diagnostics found in one pass; the first one is the headline."""

    def __init__(self, errors: list[SerqError]):
        first = errors[0]
        super().__init__(first.code, first.message, first.span, first.notes)
        self.errors = errors

    def render(self, sources: dict[str, str] | None = None) -> str:
        return "\n".join(e.render(sources) for e in self.errors)


def error(code: str, message: str, span: Span | None) -> SerqError:
    return SerqError(code, message, span)
