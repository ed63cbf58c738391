"""Stylianou & Vlahavas 2020, Entity-Transformers: GPT-2 with entity attention fed by coreference (notebook 02).

- ``model``: GPT2E, GPT-2 with the entity memory layer;
- ``data``: coreference documents encoded with entity ids per token, and the entity LM training task;
- ``probes``: mention-similarity probes and the NER probe (BiLSTM tagger) on frozen hidden states;
- ``study``: fine-tuning GPT2, GPT2E and two GPT2E ablations from the shared base over seeds, the trend of
  the entity-use gap over fine-tuning budgets, the paper's claims and figures, the Hugging Face export.

Import the submodules; this package imports nothing itself. It uses the core and no other paper's folder.
"""
