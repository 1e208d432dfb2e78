"""One training step of a tiny BERT-like encoder (embeddings, LayerNorm, self-attention, GELU
feed-forward, pooler, classifier) under numprobe's PrecisionDebugger, written with plain torch so
no `transformers` is needed. Its LayerNorms keep their initial weight 1 and bias 0, as a freshly
built BERT's do: a statistics-mode replay then draws constant weights, and layer_norm's input
gradient is zero for any output gradient that is affine in the normalized input.

usage: python bert_like_model.py --config cfg.json [--dump-path DIR]
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Layer(nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.inter = nn.Linear(hidden, ffn)
        self.out = nn.Linear(ffn, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=1e-12)

    def split(self, x):
        b, s, h = x.shape
        return x.view(b, s, self.heads, h // self.heads).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        probs = F.dropout(F.softmax(scores, dim=-1), p=0.1, training=self.training)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(x.shape)
        x = self.attn_norm(self.attn_out(ctx) + x)
        return self.out_norm(self.out(F.gelu(self.inter(x))) + x)


class BertLike(nn.Module):
    def __init__(self, vocab=64, hidden=32, heads=4, ffn=64, layers=2, positions=16, classes=3):
        super().__init__()
        self.words = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(positions, hidden)
        self.emb_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(Layer(hidden, heads, ffn) for _ in range(layers))
        self.pool = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.emb_norm(self.words(ids) + self.positions(pos))
        for layer in self.layers:
            x = layer(x)
        return self.classifier(torch.tanh(self.pool(x[:, 0])))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--dump-path")
    a = p.parse_args()
    from numprobe.pytorch import PrecisionDebugger, seed_all

    seed_all(seed=1234)
    debugger = PrecisionDebugger(config_path=a.config, dump_path=a.dump_path)
    model = BertLike()
    model.train()
    ids = torch.randint(0, 64, (4, 16))
    labels = torch.randint(0, 3, (4,))
    debugger.start(model=model)
    loss = F.cross_entropy(model(ids), labels)
    loss.backward()
    debugger.stop()
    debugger.step()


if __name__ == "__main__":
    main()
