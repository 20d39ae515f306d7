"""Syntax trees -> typed graphs for the GNN encoder (tree-sitter cpp/cuda, any grammar really).

Nodes are syntax nodes (pre-order, capped at ``max_nodes``). Each node carries
* its node type, as an index into a :class:`NodeTypeVocab` built from the grammar's own list of
  node kinds (so the vocabulary is fixed per grammar, independent of the data), and
* up to ``TOKENS_PER_NODE`` hashed sub-tokens of its text when it is a leaf (identifier parts,
  literals, operators), ``PAD`` elsewhere.

Edges (typed; each also has its reverse type so messages flow both ways):
    child / parent           syntax tree
    next_sibling / prev      consecutive children of one node
    next_token / prev        consecutive leaves (the token stream)
    def_use / use_def        a declared name (parameter, local) -> later uses of that name
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Optional, Sequence

from tree_sitter import Language, Node

from corpora.code.parse import cpp_language, cuda_language

EDGE_TYPES = ("child", "parent", "next_sibling", "prev_sibling", "next_token", "prev_token", "def_use", "use_def")
N_EDGE_TYPES = len(EDGE_TYPES)
TOKEN_BUCKETS = 2048
PAD = TOKEN_BUCKETS  # padding index for absent tokens
TOKENS_PER_NODE = 3

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\w\s]+")
_NAME_TYPES = {"identifier", "field_identifier", "type_identifier", "namespace_identifier", "statement_identifier"}
_DECLARATOR_PARENTS = {"init_declarator", "parameter_declaration", "optional_parameter_declaration",
                       "pointer_declarator", "reference_declarator", "array_declarator", "declaration",
                       "for_range_loop", "structured_binding_declarator"}


class NodeTypeVocab:
    """Node-type names of a grammar -> dense indices (index 0 = unknown)."""

    def __init__(self, names: Sequence[str], language_name: str = ""):
        self.language_name = language_name
        self.names = ["<unk>"] + sorted(set(names))
        self.index = {n: i for i, n in enumerate(self.names)}

    @classmethod
    def from_language(cls, language: Language, language_name: str = "") -> "NodeTypeVocab":
        names = []
        for i in range(language.node_kind_count):
            name = language.node_kind_for_id(i)
            if name:
                names.append(name)
        return cls(names, language_name)

    def __len__(self) -> int:
        return len(self.names)

    def __call__(self, type_name: str) -> int:
        return self.index.get(type_name, 0)

    def to_dict(self) -> dict:
        return {"language": self.language_name, "names": self.names[1:]}

    @classmethod
    def from_dict(cls, d: dict) -> "NodeTypeVocab":
        return cls(d["names"], d.get("language", ""))


@lru_cache(maxsize=4)
def vocab_for(language_name: str) -> NodeTypeVocab:
    if language_name == "cpp":
        return NodeTypeVocab.from_language(cpp_language(), "cpp")
    if language_name == "cuda":
        return NodeTypeVocab.from_language(cuda_language(), "cuda")
    raise ValueError(f"no vocabulary for language {language_name!r}")


def hash_token(tok: str) -> int:
    return zlib.crc32(tok.encode()) % TOKEN_BUCKETS


def subtokens(text: str) -> list[str]:
    return [t.lower() for t in _CAMEL.findall(text)]


@dataclass
class SyntaxGraph:
    node_types: list[int]
    node_tokens: list[list[int]]  # each TOKENS_PER_NODE long, PAD-filled
    edges: list[tuple[int, int, int]] = field(default_factory=list)  # (src, dst, type)

    @property
    def n_nodes(self) -> int:
        return len(self.node_types)

    def to_data(self):
        """A torch_geometric ``Data`` (x_type [N], x_tok [N, K], edge_index [2, E], edge_type [E])."""
        import torch
        from torch_geometric.data import Data

        if self.edges:
            ei = torch.tensor([[s for s, _, _ in self.edges], [d for _, d, _ in self.edges]], dtype=torch.long)
            et = torch.tensor([t for _, _, t in self.edges], dtype=torch.long)
        else:
            ei = torch.zeros((2, 0), dtype=torch.long)
            et = torch.zeros((0,), dtype=torch.long)
        return Data(x_type=torch.tensor(self.node_types, dtype=torch.long),
                    x_tok=torch.tensor(self.node_tokens, dtype=torch.long).view(-1, TOKENS_PER_NODE),
                    edge_index=ei, edge_type=et, num_nodes=len(self.node_types))


def syntax_graph(root: Node, vocab: NodeTypeVocab, max_nodes: int = 512,
                 token_map: Optional[Callable[[str], str]] = None, skip_comments: bool = True) -> SyntaxGraph:
    """Build the typed graph of the tree under ``root`` (see module doc).

    ``token_map`` rewrites leaf text before hashing (e.g. a backend's target name -> "T", so
    two targets' code for the same role hash alike).
    """
    nodes: list[Node] = []
    index: dict[int, int] = {}
    parent_of: list[int] = []
    stack: list[tuple[Node, int]] = [(root, -1)]
    while stack and len(nodes) < max_nodes:
        n, parent = stack.pop()
        if skip_comments and n.type == "comment":
            continue
        i = len(nodes)
        nodes.append(n)
        index[n.id] = i
        parent_of.append(parent)
        for c in reversed(n.children):
            stack.append((c, i))

    types = [vocab(n.type) for n in nodes]
    toks: list[list[int]] = []
    leaves: list[int] = []
    for i, n in enumerate(nodes):
        row = [PAD] * TOKENS_PER_NODE
        if n.child_count == 0 or n.type in ("string_literal", "number_literal", "char_literal"):
            text = n.text.decode("utf-8", errors="replace") if n.text is not None else ""
            if token_map is not None:
                text = token_map(text)
            parts = subtokens(text)[:TOKENS_PER_NODE] if n.type != "string_literal" else ["<str>"]
            for j, p in enumerate(parts):
                row[j] = hash_token(p)
            if n.child_count == 0:
                leaves.append(i)
        toks.append(row)

    edges: list[tuple[int, int, int]] = []
    last_child: dict[int, int] = {}
    for i, p in enumerate(parent_of):
        if p < 0:
            continue
        edges.append((p, i, 0))
        edges.append((i, p, 1))
        prev = last_child.get(p)
        if prev is not None:
            edges.append((prev, i, 2))
            edges.append((i, prev, 3))
        last_child[p] = i
    for a, b in zip(leaves, leaves[1:]):
        edges.append((a, b, 4))
        edges.append((b, a, 5))
    # def-use: names introduced by declarators, linked to later plain uses of the same name
    defs: dict[str, int] = {}
    for i, n in enumerate(nodes):
        if n.type != "identifier":
            continue
        name = n.text.decode("utf-8", errors="replace") if n.text is not None else ""
        par = nodes[parent_of[i]] if parent_of[i] >= 0 else None
        if par is not None and par.type in _DECLARATOR_PARENTS and (
                par.child_by_field_name("declarator") is not None and par.child_by_field_name("declarator").id == n.id
                or par.type in ("init_declarator", "pointer_declarator", "reference_declarator", "array_declarator")):
            defs[name] = i
        elif name in defs:
            edges.append((defs[name], i, 6))
            edges.append((i, defs[name], 7))
    return SyntaxGraph(types, toks, edges)
