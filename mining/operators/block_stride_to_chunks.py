"""block_stride_to_chunks: a block-stride loop, in which the threads of one block walk a range
together with stride `blockDim.x`,

    for (int j = threadIdx.x; j < L; j += blockDim.x) body

becomes one contiguous chunk per thread:

    for (int ks_chunk = (L + blockDim.x - 1) / blockDim.x, j = threadIdx.x * ks_chunk;
         j < L && j < (threadIdx.x + 1) * ks_chunk; ++j) body

This is the simpler form where a block cannot grow to one thread per element (a row longer than
1024 elements swept by one block): every index in [0, L) is still visited exactly once, by one
thread, but a warp's accesses in one iteration are no longer consecutive (uncoalesced), which is
what the block-stride form buys. Per-thread accumulations then run over another subset of the
range in another order: the results agree up to rounding, and the gate judges that.

Sites: the start is `threadIdx.x` (or a local initialised to it and never assigned), the stride
`blockDim.x` (or such a local), the condition `j < L`; the body has no barrier, warp
collective, `break`, `continue` or `return`, does not assign the variables of L, and does not
read the thread index (its work may depend only on j).

Forward: none here; grid_stride skills are served by `grid_stride` (grid_stride.py).
"""
from __future__ import annotations

import re
from typing import Optional

from corpora.code.source import Source
from mining.carriers import grid_stride_loops
from mining.operators.base import Edit, Operator, Pair, raw_text
from mining.operators.rewrite_util import structural
from corpora.code.parse import text, walk


_SYNC = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|__any\w*|__all\w*|__activemask|"
                   r"atomic\w*|__threadfence\w*)\s*\(")


def _alias(fn_code: str, name: str, value: str) -> bool:
    """`name` is a local initialised to `value` (threadIdx.x / blockDim.x) and never assigned again."""
    n = re.escape(name)
    init = re.search(r"\b(?:const\s+)?(?:int|unsigned|unsigned int|size_t|long|long long)\s+(?:[^;]*?,\s*)?%s\s*=\s*"
                     r"\(?\s*(?:int|unsigned)?\s*\)?\s*%s\s*[,;]" % (n, re.escape(value)), fn_code)
    if not init:
        return False
    assigned = re.findall(r"(?<![=!<>])\b%s\s*([-+*/%%&|^]|<<|>>)?=(?!=)|\+\+\s*%s\b|\b%s\s*(\+\+|--)" % (n, n, n),
                          fn_code)
    return len(assigned) == 1  # the initialisation itself


class BlockStrideToChunks(Operator):
    name = "block_stride_to_chunks"
    carrier = "grid_stride"
    description = "let each thread sweep a contiguous chunk instead of striding by the block size"

    def edits(self, src: Source):
        st = structural(src)
        for loop in grid_stride_loops(st):
            e = self.rewrite(st, loop)
            if e is not None:
                yield e

    def rewrite(self, src: Source, loop) -> Optional[Edit]:
        init = loop.child_by_field_name("initializer")
        cond = loop.child_by_field_name("condition")
        upd = loop.child_by_field_name("update")
        body = loop.child_by_field_name("body")
        if init is None or cond is None or upd is None or body is None or init.type != "declaration":
            return None
        f = src.function_at(loop.start_byte)
        if f is None:
            return None
        fn_code = src.func_code(f).decode("utf-8", "replace")
        decls = [d for d in init.named_children if d.type == "init_declarator"]
        if len(decls) != 1 or len([d for d in init.named_children if d.type.endswith("declarator")
                                   or d.type == "identifier"]) != 1:
            return None
        var_node = decls[0].child_by_field_name("declarator")
        start_node = decls[0].child_by_field_name("value")
        if var_node is None or var_node.type != "identifier" or start_node is None:
            return None
        var = text(var_node)
        start = " ".join(text(start_node).split())
        typ = " ".join(text(init.child_by_field_name("type")).split())
        if re.search(r"\b(const|auto)\b", raw_text(src, init.start_byte, var_node.start_byte)):
            return None
        m = re.fullmatch(r"(\w+)\s*\+=\s*(.+)", " ".join(text(upd).split()))
        if m is None or m.group(1) != var:
            return None
        stride = m.group(2).strip()
        if not (stride == "blockDim.x" or (re.fullmatch(r"\w+", stride) and _alias(fn_code, stride, "blockDim.x"))):
            return None
        if not (start == "threadIdx.x" or (re.fullmatch(r"\w+", start) and _alias(fn_code, start, "threadIdx.x"))):
            return None
        c = " ".join(src.code[cond.start_byte:cond.end_byte].decode("utf-8", "replace").split())
        cm = re.fullmatch(r"%s\s*<\s*(.+)" % re.escape(var), c)
        if cm is None:
            return None
        limit = cm.group(1).strip()
        if re.search(r"\b%s\b" % re.escape(var), limit):
            return None
        btext = src.code[body.start_byte:body.end_byte].decode("utf-8", "replace")
        if re.search(r"\b(break|continue|return|goto)\b", btext) or _SYNC.search(btext):
            return None
        if re.search(r"\bthreadIdx\b|\b%s\b|\b%s\b" % (re.escape(start), re.escape(stride)), btext):
            return None
        # the body must not change the limit (nor the loop variable: j += ... inside would skip indices)
        for n in walk(body):
            if n.type in ("assignment_expression", "update_expression"):
                target = n.child_by_field_name("left") if n.type == "assignment_expression" else \
                    n.child_by_field_name("argument")
                base = target
                while base is not None and base.type in ("subscript_expression", "field_expression",
                                                         "parenthesized_expression"):
                    base = base.child_by_field_name("argument") if base.type != "parenthesized_expression" \
                        else base.named_children[0]
                name = text(base) if base is not None else ""
                if name == var or re.search(r"\b%s\b" % re.escape(name), limit):
                    return None
        lim = limit if re.fullmatch(r"[\w.]+|\([^()]*\)", limit) else f"({limit})"
        s1 = start if re.fullmatch(r"[\w.]+", start) else f"({start})"
        header = (f"for ({typ} ks_chunk = ({lim} + {stride} - 1) / {stride}, {var} = {s1} * ks_chunk; "
                  f"{var} < {lim} && {var} < ({s1} + 1) * ks_chunk; ++{var})")
        # keep everything from the closing parenthesis of the header on (comments, the body) byte-identical
        close = src.code.rfind(b")", loop.start_byte, body.start_byte)
        return Edit(loop.start_byte, close + 1, header)


PAIR = Pair(BlockStrideToChunks)
