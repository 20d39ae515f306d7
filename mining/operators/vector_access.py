"""Shared helpers of the vector-access operators: the scalar element type behind a vector
reinterpretation, and the scalar spelling of element k."""
from __future__ import annotations

import re
from typing import Optional

from corpora.code.source import Source
from mining.carriers import VectorAccess

# vector type -> (scalar element type, components, constructor)
VECTORS = {
    **{f"float{n}": ("float", n) for n in (2, 3, 4)},
    **{f"int{n}": ("int", n) for n in (2, 3, 4)},
    **{f"uint{n}": ("unsigned int", n) for n in (2, 3, 4)},
    "double2": ("double", 2),
}
FIELDS = "xyzw"
_SCALAR_SPELLINGS = {"float": {"float"}, "int": {"int", "int32_t", "signed int"},
                     "unsigned int": {"unsigned", "unsigned int", "uint32_t"}, "double": {"double"}}


def pointer_type(src: Source, byte: int, name: str) -> Optional[str]:
    """The pointee type of pointer `name` as seen at `byte` (a parameter or a local declaration)."""
    f = src.function_at(byte)
    if f is None:
        return None
    for p in f.params:
        if p.name == name and p.pointer_depth == 1:
            return p.base_type
    code = src.code[f.start_byte:byte].decode("utf-8", "replace")
    m = None
    for m in re.finditer(r"\b((?:unsigned\s+)?\w+)\s*(?:const\s*)?\*\s*(?:const\s*)?(?:__restrict__\s*)?%s\s*=" % re.escape(name),
                         code):
        pass
    return m.group(1) if m else None


def scalar_base_ok(src: Source, a: VectorAccess) -> bool:
    """The reinterpreted pointer points at the vector's own scalar type (so element k is base[k])."""
    if a.vec_type not in VECTORS:
        return False
    m = re.match(r"\s*\(?\s*([A-Za-z_]\w*)", a.base)
    if not m:
        return False
    t = pointer_type(src, a.cast.start_byte, m.group(1))
    return t is not None and " ".join(t.split()) in _SCALAR_SPELLINGS[VECTORS[a.vec_type][0]]


def element(a: VectorAccess, k: int, ldg: bool) -> str:
    n = VECTORS[a.vec_type][1]
    idx = (a.index or "0").strip()
    off = str(k) if idx == "0" else f"{n} * ({idx})" + (f" + {k}" if k else "")
    return f"__ldg(({a.base}) + {off})" if ldg else f"({a.base})[{off}]"
