"""The GraphEncoder of retrieval/gnn.py, forward pass only, in numpy.

Importing torch + torch-geometric costs 4-6 s; a query needs one small graph embedded. At
index time ``export_weights(model, path)`` writes the trained weights as one ``.npz``; at
query time ``NumpyGraphEncoder(path).embed(graphs)`` computes the same vectors from
``SyntaxGraph`` objects (retrieval/graphs.py) without torch. The index checks the two agree
(cosine > 0.999) when it exports, and the tests check it too.

Forward (mirrors ``build_encoder``): x = type_emb[type] + sum(tok_emb[tokens]); per layer,
GINEConv (message relu(x_src + lin(edge_emb[type])), summed at the destination, plus
(1 + eps) x, then Linear-ReLU-Linear), LayerNorm, ReLU, residual; mean and max pooling;
Linear-ReLU-Linear projection; L2 normalization.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

LN_EPS = 1e-5


def export_weights(model, path: os.PathLike | str) -> Path:
    """Write a trained GraphEncoder's weights (+ its config) as an uncompressed .npz."""
    import dataclasses

    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    arrays["__config__"] = np.frombuffer(json.dumps(dataclasses.asdict(model.cfg)).encode(), dtype=np.uint8)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
    return path


class NumpyGraphEncoder:
    def __init__(self, path: os.PathLike | str):
        import numpy as np

        with np.load(Path(path)) as z:
            self.w = {k: z[k] for k in z.files if k != "__config__"}
            self.cfg = json.loads(bytes(z["__config__"]).decode())
        self.layers = int(self.cfg["layers"])
        self.out_dim = int(self.cfg["out_dim"])
        # messages depend on the edge only through its type: project the few edge-type embeddings once
        self.edge_proj = [self._lin(self.w["edge_emb.weight"], f"convs.{i}.lin") for i in range(self.layers)]
        self.wt = {k: np.ascontiguousarray(v.T) for k, v in self.w.items() if k.endswith(".weight") and v.ndim == 2}

    def _lin(self, x, name: str):
        wt = getattr(self, "wt", None)
        m = wt[name + ".weight"] if wt else self.w[name + ".weight"].T
        return x @ m + self.w[name + ".bias"]

    def embed_one(self, g) -> Any:
        """One SyntaxGraph -> (out_dim,) float32, L2-normalized."""
        return self.embed([g])[0]

    def embed(self, graphs: Sequence[Any]):
        """SyntaxGraphs -> (n, out_dim) float32, L2-normalized; one batched pass (graphs are
        disjoint blocks of one big graph, pooled per block)."""
        import numpy as np

        if not graphs:
            return np.zeros((0, self.out_dim), np.float32)
        w = self.w
        sizes = np.array([len(g.node_types) for g in graphs], dtype=np.int64)
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        types = np.concatenate([np.asarray(g.node_types, dtype=np.int64) for g in graphs])
        toks = np.concatenate([np.asarray(g.node_tokens, dtype=np.int64).reshape(len(g.node_types), -1)
                               for g in graphs])
        edges = [np.asarray(g.edges, dtype=np.int64).reshape(-1, 3) + np.array([o, o, 0]) for g, o in zip(graphs, offs)]
        e = np.concatenate(edges) if edges else np.zeros((0, 3), np.int64)
        x = w["type_emb.weight"][types] + w["tok_emb.weight"][toks].sum(1)
        if len(e):
            order = np.argsort(e[:, 1], kind="stable")
            src, dst, et = e[order, 0], e[order, 1], e[order, 2]
            starts = np.flatnonzero(np.r_[True, dst[1:] != dst[:-1]])
            targets = dst[starts]
        for i in range(self.layers):
            p = f"convs.{i}."
            agg = np.zeros_like(x)
            if len(e):
                # sum of messages per destination: reduceat over the contiguous last axis (2x faster
                # than over axis 0 for these shapes)
                msg_t = np.ascontiguousarray(np.maximum(x[src] + self.edge_proj[i][et], 0.0).T)
                agg[targets] = np.add.reduceat(msg_t, starts, axis=1).T
            h = agg + (1.0 + float(w[p + "eps"].reshape(-1)[0])) * x
            h = self._lin(np.maximum(self._lin(h, p + "nn.0"), 0.0), p + "nn.2")
            mu = h.mean(-1, keepdims=True)
            var = ((h - mu) ** 2).mean(-1, keepdims=True)
            h = (h - mu) / np.sqrt(var + LN_EPS) * w[f"norms.{i}.weight"] + w[f"norms.{i}.bias"]
            x = x + np.maximum(h, 0.0)
        nz = sizes > 0
        pooled = np.zeros((len(graphs), 2 * x.shape[1]), dtype=x.dtype)
        if nz.any():
            st = offs[nz]
            pooled[nz, :x.shape[1]] = np.add.reduceat(x, st, axis=0) / sizes[nz, None]
            pooled[nz, x.shape[1]:] = np.maximum.reduceat(x, st, axis=0)
        z = self._lin(np.maximum(self._lin(pooled, "proj.0"), 0.0), "proj.2")
        return (z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)).astype(np.float32)
