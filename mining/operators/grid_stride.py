"""grid_stride_to_single: a grid-stride loop `for (T i = start; cond; i += stride) body` becomes
one element per thread: `{ T i = start; if (cond) body }`.

Correct only when the launch provides a thread for every element; the operator does not try to
prove that (the host clamps grids in many kernels): the gate rejects the rewrite when the
launch does not cover the range. Loops whose body uses `break` / `continue` are not sites.

A loop whose variable is declared outside it (`int i = ...; for (; i + s < n; i += 2 * s)`, an
unrolled main loop followed by a remainder loop that continues from its final `i`) becomes one
guarded iteration that still advances the variable when the rest of the function reads it:
`if (cond) { body  i += stride; }`. With a covering launch the loop ran at most once, and this
is that one iteration, final value included.
"""
from __future__ import annotations

import re

from mining.carriers import grid_stride_loops
from mining.operators.base import Edit, Operator, raw_text
from corpora.code.parse import text


class GridStrideToSingle(Operator):
    name = "grid_stride_to_single"
    carrier = "grid_stride"
    description = "replace a grid-stride loop by one guarded element per thread"

    def edits(self, src):
        for loop in grid_stride_loops(src):
            init = loop.child_by_field_name("initializer")
            cond = loop.child_by_field_name("condition")
            body = loop.child_by_field_name("body")
            upd = loop.child_by_field_name("update")
            if cond is None or body is None or upd is None:
                continue
            if re.search(rb"\b(break|continue)\b", src.code[body.start_byte:body.end_byte]):
                continue
            guarded = f"if ({raw_text(src, cond.start_byte, cond.end_byte)}) "
            if init is not None and init.type == "declaration":
                rep = "{ " + raw_text(src, init.start_byte, init.end_byte).rstrip()
                if not rep.endswith(";"):
                    rep += ";"
                rep += " " + guarded + raw_text(src, body.start_byte, body.end_byte) + " }"
                yield Edit(loop.start_byte, loop.end_byte, rep)
                continue
            if init is not None and init.type not in ("assignment_expression", "comma_expression"):
                continue
            var = re.match(r"^(\w+)\s*\+=", " ".join(text(upd).split())).group(1)
            rep = guarded + self._advance(src, loop, body, " ".join(text(upd).split()), var)
            if init is not None:
                rep = "{ " + raw_text(src, init.start_byte, init.end_byte) + "; " + rep + " }"
            yield Edit(loop.start_byte, loop.end_byte, rep)

    @staticmethod
    def _advance(src, loop, body, update: str, var: str) -> str:
        """The body, followed by the update when the function reads the variable after the loop."""
        f = src.function_at(loop.start_byte)
        later = src.code[loop.end_byte:f.end_byte] if f is not None else b""
        raw = raw_text(src, body.start_byte, body.end_byte)
        if not re.search(rb"\b" + re.escape(var.encode()) + rb"\b", later):
            return raw
        if body.type != "compound_statement":
            return "{ " + raw + " " + update + "; }"
        head = raw[:-1]
        stripped = head.rstrip(" \t")
        if stripped.endswith("\n"):
            closing = head[len(stripped):]
            inner = next((_indent(src, c.start_byte) for c in body.named_children if c.type != "comment"),
                         closing + "    ")
            return stripped + inner + update + ";\n" + closing + "}"
        return head.rstrip() + " " + update + "; }"


def _indent(src, byte: int) -> str:
    a = src.raw.rfind(b"\n", 0, byte) + 1
    m = re.match(rb"[ \t]*", src.raw[a:byte])
    return m.group(0).decode() if m else ""
