"""vector_load_to_scalar: one 16-byte (or 8-byte) global load through a vector reinterpretation
becomes per-component scalar loads assembled with `make_<vec>`:

    const float4* p4 = reinterpret_cast<const float4*>(p);   v = p4[i];
    ->  v = make_float4((p)[4 * (i)], (p)[4 * (i) + 1], (p)[4 * (i) + 2], (p)[4 * (i) + 3]);

`__ldg(p4 + i)` keeps the read-only path per component (`__ldg((p) + 4 * (i) + k)`); removing
`__ldg` is ldg_to_plain_load's job. Only casts of a pointer to the vector's own scalar type.

Every other wide global load, however spelled (view macros, pointers bound to a cast, parameters
typed `uint4 *`, struct types, copies into registers or shared memory), is narrowed by the
type-directed rewrite of `devectorize.py`: the same optimization, so the same skill.
"""
from __future__ import annotations

from mining.carriers import vector_accesses
from mining.operators.base import Edit, Operator
from mining.operators.devectorize import devectorize_edits
from mining.operators.vector_access import VECTORS, element, scalar_base_ok


class VectorLoadToScalar(Operator):
    name = "vector_load_to_scalar"
    carrier = "vector_load"
    description = "split one vector global load into scalar loads"

    def edits(self, src):
        own = list(self._house_edits(src))
        yield from own
        yield from devectorize_edits(src, "load", skip=[(e.start, e.end) for e in own])

    def _house_edits(self, src):
        for a in vector_accesses(src):
            if a.kind != "load" or a.via not in ("subscript", "deref", "ldg") or not scalar_base_ok(src, a):
                continue
            parent = a.node.parent
            if parent is not None and parent.type == "pointer_expression" and parent.children[0].type == "&":
                continue  # its address is taken: not a value
            n = VECTORS[a.vec_type][1]
            parts = ", ".join(element(a, k, a.via == "ldg") for k in range(n))
            yield Edit(a.node.start_byte, a.node.end_byte, f"make_{a.vec_type}({parts})")
