"""grid_stride_to_single: a grid-stride loop `for (T i = start; cond; i += stride) body` becomes
one element per thread: `{ T i = start; if (cond) body }`.

Correct only when the launch provides a thread for every element; the operator does not try to
prove that (the host clamps grids in many kernels): the gate rejects the rewrite when the
launch does not cover the range. Loops whose body uses `break` / `continue`, or whose variable
is declared outside the loop (its final value may be used afterwards), are not sites.
"""
from __future__ import annotations

import re

from mining.carriers import grid_stride_loops
from mining.operators.base import Edit, Operator, raw_text


class GridStrideToSingle(Operator):
    name = "grid_stride_to_single"
    carrier = "grid_stride"
    description = "replace a grid-stride loop by one guarded element per thread"

    def edits(self, src):
        for loop in grid_stride_loops(src):
            init = loop.child_by_field_name("initializer")
            cond = loop.child_by_field_name("condition")
            body = loop.child_by_field_name("body")
            if init is None or cond is None or body is None or init.type != "declaration":
                continue
            if re.search(rb"\b(break|continue)\b", src.code[body.start_byte:body.end_byte]):
                continue
            rep = "{ " + raw_text(src, init.start_byte, init.end_byte).rstrip()
            if not rep.endswith(";"):
                rep += ";"
            rep += f" if ({raw_text(src, cond.start_byte, cond.end_byte)}) " + \
                raw_text(src, body.start_byte, body.end_byte) + " }"
            yield Edit(loop.start_byte, loop.end_byte, rep)
