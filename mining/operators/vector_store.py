"""vector_store_to_scalar: one vector global store `p4[i] = v;` (or `*reinterpret_cast<float4*>(q) = v;`)
becomes a block of scalar stores:

    { const float4 ks_v = (v); (p)[4 * (i)] = ks_v.x; (p)[4 * (i) + 1] = ks_v.y; ... }

Forward: `vectorize_elementwise` / `vectorize_loop` (vector_load.py) write 16-byte stores as well
as loads; a vector_store_to_scalar step is undone by them.

Every other wide global store (view macros, struct types, copies out of registers) is narrowed by
the type-directed rewrite of `devectorize.py`: the same optimization, so the same skill.
"""
from __future__ import annotations

from mining.carriers import vector_accesses
from mining.operators.base import Edit, Operator, Pair, code_text
from mining.operators.devectorize import devectorize_edits
from mining.operators.vector_access import FIELDS, VECTORS, element, scalar_base_ok


class VectorStoreToScalar(Operator):
    name = "vector_store_to_scalar"
    carrier = "vector_store"
    description = "split one vector global store into scalar stores"

    def edits(self, src):
        own = list(self._house_edits(src))
        yield from own
        yield from devectorize_edits(src, "store", skip=[(e.start, e.end) for e in own])

    def _house_edits(self, src):
        tmp = "ks_v"
        while tmp.encode() in src.raw:
            tmp += "_"
        for a in vector_accesses(src):
            if a.kind != "store" or a.via not in ("subscript", "deref") or not scalar_base_ok(src, a):
                continue
            asg = a.node.parent
            if asg is None or asg.type != "assignment_expression" or asg.children[1].type != "=":
                continue
            stmt = asg.parent
            if stmt is None or stmt.type != "expression_statement":
                continue
            right = asg.child_by_field_name("right")
            n = VECTORS[a.vec_type][1]
            body = " ".join(f"{element(a, k, False)} = {tmp}.{FIELDS[k]};" for k in range(n))
            rep = f"{{ const {a.vec_type} {tmp} = ({code_text(src, right.start_byte, right.end_byte)}); {body} }}"
            yield Edit(stmt.start_byte, stmt.end_byte, rep)


PAIR = Pair(VectorStoreToScalar, inverted_by=("vectorize_elementwise", "vectorize_loop", "vectorize_copy_loop"))
