"""A tiny GPT-2 from a config (2 layers, random tokens): a real model that trains in seconds on CPU."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

VOCAB, SEQ = 128, 32


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2)
    return GPT2LMHeadModel(config)


class RandomTokens(Dataset):
    def __init__(self, n: int = 4096) -> None:
        g = torch.Generator().manual_seed(1)
        self.data = torch.randint(0, VOCAB, (n, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.data[i], "labels": self.data[i]}
