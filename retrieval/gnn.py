"""A contrastive graph encoder (torch-geometric), seeded and deterministic.

``GraphEncoder``: node-type and hashed-token embeddings -> ``layers`` x GINEConv over typed edges
-> mean + max pooling -> projection -> L2-normalized vector.

``train_contrastive``: InfoNCE (NT-Xent) over pairs. A pair is two members of the same group
(e.g. the same backend role in two targets, the same skill's anchors in two kernels) when the
group has two, else two augmented views (random node drop) of one graph. Same seed, same data,
same thread count -> the same weights (checked by the tests).

Checkpoints: ``save_checkpoint`` writes state + config + metadata in one file.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Sequence


@dataclass
class EncoderConfig:
    n_types: int
    n_buckets: int = 2049  # TOKEN_BUCKETS + PAD
    n_edge_types: int = 8
    hidden: int = 64
    out_dim: int = 64
    layers: int = 3


@dataclass
class TrainConfig:
    seed: int = 0
    epochs: int = 10
    batch_groups: int = 64
    lr: float = 3e-3
    temperature: float = 0.1
    node_drop: float = 0.1
    weight_decay: float = 1e-5
    max_steps_per_epoch: Optional[int] = None


def _torch():
    import torch

    return torch


def build_encoder(cfg: EncoderConfig):
    torch = _torch()
    from torch import nn
    from torch_geometric.nn import GINEConv, global_max_pool, global_mean_pool

    class GraphEncoder(nn.Module):
        def __init__(self, c: EncoderConfig):
            super().__init__()
            self.cfg = c
            self.type_emb = nn.Embedding(c.n_types, c.hidden)
            self.tok_emb = nn.Embedding(c.n_buckets, c.hidden, padding_idx=c.n_buckets - 1)
            self.edge_emb = nn.Embedding(c.n_edge_types, c.hidden)
            self.convs = nn.ModuleList()
            self.norms = nn.ModuleList()
            for _ in range(c.layers):
                mlp = nn.Sequential(nn.Linear(c.hidden, c.hidden), nn.ReLU(), nn.Linear(c.hidden, c.hidden))
                self.convs.append(GINEConv(mlp, edge_dim=c.hidden))
                self.norms.append(nn.LayerNorm(c.hidden))
            self.proj = nn.Sequential(nn.Linear(2 * c.hidden, c.hidden),
                                      nn.ReLU(), nn.Linear(c.hidden, c.out_dim))

        def forward(self, data):
            x = self.type_emb(data.x_type) + self.tok_emb(data.x_tok).sum(dim=1)
            e = self.edge_emb(data.edge_type)
            for conv, norm in zip(self.convs, self.norms):
                x = x + torch.relu(norm(conv(x, data.edge_index, e)))
            batch = data.batch if getattr(data, "batch", None) is not None else torch.zeros(
                x.size(0), dtype=torch.long)
            pooled = torch.cat([global_mean_pool(x, batch), global_max_pool(x, batch)], dim=1)
            return torch.nn.functional.normalize(self.proj(pooled), dim=1)

    return GraphEncoder(cfg)


def seed_everything(seed: int) -> None:
    torch = _torch()
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass
    torch.use_deterministic_algorithms(True, warn_only=True)


def drop_nodes(data, p: float, gen):
    """A view of ``data`` with a fraction ``p`` of non-root nodes (and their edges) removed."""
    torch = _torch()
    from torch_geometric.data import Data

    n = int(data.num_nodes)
    if n <= 2 or p <= 0:
        return data
    keep = torch.rand(n, generator=gen) >= p
    keep[0] = True
    idx = torch.nonzero(keep, as_tuple=False).view(-1)
    remap = torch.full((n,), -1, dtype=torch.long)
    remap[idx] = torch.arange(idx.numel())
    src, dst = data.edge_index
    ok = keep[src] & keep[dst]
    return Data(x_type=data.x_type[idx], x_tok=data.x_tok[idx],
                edge_index=torch.stack([remap[src[ok]], remap[dst[ok]]]), edge_type=data.edge_type[ok],
                num_nodes=int(idx.numel()))


def nt_xent(z1, z2, temperature: float):
    torch = _torch()
    z = torch.cat([z1, z2], dim=0)
    sim = z @ z.t() / temperature
    n = z1.size(0)
    sim.fill_diagonal_(float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return torch.nn.functional.cross_entropy(sim, targets)


def train_contrastive(graphs: Sequence[Any], groups: Sequence[Optional[Any]], enc_cfg: EncoderConfig,
                      cfg: TrainConfig, sources: Optional[Sequence[Any]] = None, log=None, progress=None):
    """Train an encoder on ``graphs`` (torch_geometric Data). ``groups[i]`` is the positive group
    of graph i (None: only augmented views). ``sources[i]`` (e.g. the target) is used to prefer
    pairs from different sources. ``progress`` (a retrieval.progress.Progress) is told the
    steps: its total becomes epochs x steps per epoch. Returns (model, info dict)."""
    torch = _torch()
    from torch_geometric.data import Batch

    seed_everything(cfg.seed)
    rng = random.Random(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    model = build_encoder(enc_cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    members: dict[Any, list[int]] = {}
    singles: list[int] = []
    for i, g in enumerate(groups):
        if g is None:
            singles.append(i)
        else:
            members.setdefault(g, []).append(i)
    units: list[tuple[str, Any]] = [("group", g) for g in sorted(members, key=str)] + [("single", i) for i in singles]
    if progress is not None:
        per_epoch = sum(1 for s in range(0, len(units), cfg.batch_groups) if len(units[s: s + cfg.batch_groups]) >= 2)
        if cfg.max_steps_per_epoch:
            per_epoch = min(per_epoch, cfg.max_steps_per_epoch)
        progress.total = float(max(per_epoch * cfg.epochs, 1))
        progress.unit = "steps"
    losses: list[float] = []
    started = time.monotonic()
    model.train()
    for epoch in range(cfg.epochs):
        rng.shuffle(units)
        steps = 0
        epoch_loss = 0.0
        for s in range(0, len(units), cfg.batch_groups):
            chunk = units[s: s + cfg.batch_groups]
            if len(chunk) < 2:
                continue
            a_list, b_list = [], []
            for kind, u in chunk:
                if kind == "group" and len(members[u]) >= 2:
                    idxs = members[u]
                    i = rng.choice(idxs)
                    others = [j for j in idxs if j != i and (sources is None or sources[j] != sources[i])]
                    if not others:
                        others = [j for j in idxs if j != i]
                    j = rng.choice(others)
                    a_list.append(drop_nodes(graphs[i], cfg.node_drop, gen))
                    b_list.append(drop_nodes(graphs[j], cfg.node_drop, gen))
                else:
                    i = members[u][0] if kind == "group" else u
                    a_list.append(drop_nodes(graphs[i], cfg.node_drop * 2, gen))
                    b_list.append(drop_nodes(graphs[i], cfg.node_drop * 2, gen))
            za = model(Batch.from_data_list(a_list))
            zb = model(Batch.from_data_list(b_list))
            loss = nt_xent(za, zb, cfg.temperature)
            opt.zero_grad()
            loss.backward()
            opt.step()
            epoch_loss += loss.item()
            steps += 1
            if progress is not None:
                progress.advance(note=f"epoch {epoch + 1}/{cfg.epochs}")
            if cfg.max_steps_per_epoch and steps >= cfg.max_steps_per_epoch:
                break
        losses.append(round(epoch_loss / max(steps, 1), 5))
        if log:
            log(f"epoch {epoch + 1}/{cfg.epochs} loss {losses[-1]:.4f}")
    model.eval()
    info = {"encoder": asdict(enc_cfg), "train": asdict(cfg), "losses": losses, "n_graphs": len(graphs),
            "n_groups": len(members), "seconds": round(time.monotonic() - started, 2),
            "torch_threads": torch.get_num_threads()}
    return model, info


def embed(model, graphs: Sequence[Any], batch_size: int = 128, progress=None):
    torch = _torch()
    import numpy as np
    from torch_geometric.data import Batch

    out = []
    model.eval()
    with torch.no_grad():
        for s in range(0, len(graphs), batch_size):
            out.append(model(Batch.from_data_list(list(graphs[s: s + batch_size]))).numpy())
            if progress is not None:
                progress.advance(len(graphs[s: s + batch_size]))
    return np.concatenate(out, axis=0).astype(np.float32) if out else np.zeros((0, model.cfg.out_dim), np.float32)


def save_checkpoint(path: os.PathLike | str, model, metadata: dict) -> str:
    """Write the model (state + encoder config + metadata) atomically; returns its sha256."""
    torch = _torch()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save({"state": model.state_dict(), "encoder": asdict(model.cfg), "metadata": metadata}, tmp)
    os.replace(tmp, path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_checkpoint(path: os.PathLike | str):
    torch = _torch()
    ck = torch.load(Path(path), map_location="cpu", weights_only=False)
    model = build_encoder(EncoderConfig(**ck["encoder"]))
    model.load_state_dict(ck["state"])
    model.eval()
    return model, ck["metadata"]


def fingerprint(items: Sequence[Any]) -> str:
    h = hashlib.sha256()
    for it in items:
        h.update(json.dumps(it, sort_keys=True, default=str).encode())
    return h.hexdigest()
