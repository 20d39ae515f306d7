"""ldg_to_plain_load: `__ldg(p)` -> `*(p)` (an ordinary, coherent global load).

Forward, `add_ldg`: reads `p[i]` through a const pointer of a scalar or vector type become
`__ldg(&p[i])` (outermost subscripts only, never a written or address-taken element). Sound
because the kernel never writes through a const pointer, so the read-only path sees the same
values for the kernel's lifetime (unless another pointer aliases it: the gate's workloads decide).

The other cache-operator loads (`__ldcs`, `__ldcg`, ...) are other optimizations with their own
names: cache_hints.py removes each under its own carrier.
"""
from __future__ import annotations



from corpora.code.nodes import call_name
from corpora.code.source import Source
from mining.operators.base import (Context, Edit, Materialization, Operator, Pair, Rewrite, per_kernel_and_all, raw_text)
from mining.operators.nodes import address_taken, code, in_ldg, is_lhs, kernels, local_pointers, raw, subscripts_of


class LdgToPlainLoad(Operator):
    name = "ldg_to_plain_load"
    carrier = "ldg"
    description = "replace a read-only-path load `__ldg(p)` by the plain load `*(p)`"

    def edits(self, src):
        for call in src.nodes("call_expression"):
            if call_name(call) != "__ldg":
                continue
            args = call.child_by_field_name("arguments")
            if args is None or len(args.named_children) != 1:
                continue
            arg = args.named_children[0]
            yield Edit(call.start_byte, call.end_byte, f"*({raw_text(src, arg.start_byte, arg.end_byte)})")


# --------------------------------------------------------------------------- forward half
LDG_TYPES = {"float", "double", "int", "unsigned", "unsigned int", "long long", "unsigned long long", "char",
             "unsigned char", "short", "unsigned short", "float2", "float4", "int2", "int4", "uint2", "uint4",
             "double2", "int32_t", "uint32_t", "int64_t", "uint64_t"}


def add_ldg(source: str, ctx: Context) -> list[Materialization]:
    src = Source(source)
    per = []
    for k in kernels(src):
        ptrs = {n: t for n, (t, const) in local_pointers(src, k).items() if const and " ".join(t.split()) in LDG_TYPES}
        subs = [s for s in subscripts_of(src, k.body, ptrs) if not is_lhs(s) and not address_taken(s)
                and in_ldg(s) is None]
        # outermost only: an inner load inside an outer one goes along with the outer's text
        subs = [s for s in subs if not any(o is not s and o.start_byte <= s.start_byte and s.end_byte <= o.end_byte
                                           for o in subs)]
        edits = [Edit(s.start_byte, s.end_byte, f"__ldg(&{raw(src, s)})") for s in subs]
        per.append((k.name, edits, code(src, subs[0]) if subs else ""))
    return per_kernel_and_all(src, "add_ldg", per, "read-only loads through `__ldg`")


PAIR = Pair(LdgToPlainLoad, (Rewrite("add_ldg", "ldg", add_ldg, prior=1.1),))
