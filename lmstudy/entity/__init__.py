"""Stylianou & Vlahavas 2020, Entity-Transformers: GPT-2 with entity attention fed by coreference (notebook 02).

- ``model``: GPT2E, GPT-2 with the entity memory layer;
- ``data``: coreference documents encoded with entity ids per token, and the entity LM training task;
- ``probes``: mention-similarity probes and the NER probe (BiLSTM tagger) on frozen hidden states;
- the study, by job: ``config`` (its settings, the base model), ``documents`` (the coreference corpora's splits),
  ``runs`` (fine-tuning GPT2, GPT2E and two GPT2E ablations from the shared base over seeds, and the tables of
  those runs, the trend over fine-tuning budgets among them), ``timing`` (time per step), ``similarity`` (Table 4,
  t-SNE), ``ner`` (Table 5), ``claims`` (the paper's claims and the ablation table), ``plots``, ``export`` (the
  Hugging Face folder).

Import the submodules; this package imports nothing itself. It uses the core and no other paper's folder.
"""
