"""drop_pipeline_sync: once a file issues no asynchronous copies (async_copy_to_sync has made them
plain stores), its `__pipeline_commit()` and `__pipeline_wait_prior(n)` statements wait for
nothing and are deleted, one statement per site. The shared-memory ring itself stays: its reuse
is still ordered by the block barriers around it (a stage is refilled only after the barrier that
follows its last read), so the kernel stays correct with synchronous copies. The inline-PTX group
calls (`cp.async.commit_group` / `wait_group N` / `wait_all`, in an `asm` statement, a macro or a
device function: mining/operators/ptx_async.py) are deleted the same way. Not a site while any
function still issues an asynchronous copy (`__pipeline_memcpy_async`, `memcpy_async`, a PTX
`cp.async` copy in any of its spellings). When no pipeline
call is left at all, the `#include <cuda_pipeline.h>` line is the last site.

Forward: async_copy_to_sync's `async_copy_fill`, which issues a shared tile's element copies
asynchronously and adds the `__pipeline_commit(); __pipeline_wait_prior(0);` this operator deletes,
just before the barrier that publishes the tile (its docstring argues soundness). Deeper stages
(`wait_prior(n)` with n > 0, a ring of tiles refilled while one is read) are not introduced
deterministically: that needs a double buffer, double_to_single_buffer's inverse.
"""
from __future__ import annotations

import re

from corpora.code.nodes import call_name
from corpora.code.source import Source
from mining.operators.base import Edit, Operator, Pair
from mining.operators.ptx_async import group_statements, issues_copies
from mining.operators.rewrite_util import structural
from corpora.code.parse import walk


class DropPipelineSync(Operator):
    name = "drop_pipeline_sync"
    carrier = "multi_stage_pipeline"
    description = "delete pipeline commit / wait calls that no longer have copies to wait for"

    def edits(self, src: Source):
        st = structural(src)
        if issues_copies(st):
            return
        for stmt in group_statements(st):
            if stmt.parent is not None and stmt.parent.type != "compound_statement":
                yield Edit(stmt.start_byte, stmt.end_byte, ";")
            else:
                s, e = st.line_span(stmt.start_byte, stmt.end_byte)
                yield Edit(s, e, "")
        if not re.search(rb"\b__pipeline_\w+\s*\(", src.code):
            for m in re.finditer(rb"(?m)^[ \t]*#[ \t]*include[ \t]*[<\"]cuda_pipeline(_primitives)?\.h[>\"][^\n]*\n?",
                                 src.code):
                yield Edit(m.start(), m.end(), "")
            return
        for call in walk(st.tree.root_node):
            if call.type != "call_expression" or call_name(call) not in ("__pipeline_commit", "__pipeline_wait_prior"):
                continue
            stmt = call.parent
            if stmt is None or stmt.type != "expression_statement":
                continue
            if stmt.parent is not None and stmt.parent.type != "compound_statement":
                yield Edit(stmt.start_byte, stmt.end_byte, ";")
            else:
                s, e = st.line_span(stmt.start_byte, stmt.end_byte)
                yield Edit(s, e, "")


PAIR = Pair(DropPipelineSync, inverted_by=("async_copy_fill",))
