"""The backend corpus: LLVM-style target trees (``tree``: functions, TableGen records, fixups,
relocations) and fetching LLVM's sources at use time (``llvm``). ``llvm-toy/`` is the shipped
three-target fixture tree."""
