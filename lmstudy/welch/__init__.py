"""Welch et al. 2020, in-domain embedding initialisation for LSTM language models (notebooks 01, 01b).

- ``awd_lstm``: the AWD-LSTM (Merity et al.) and its training task with carried hidden state;
- ``embedding_config``: the valid combinations of tying, freezing and pretrained input/output embeddings;
- ``embeddings``: word2vec pretraining on a domain's pretraining text (gensim) and GloVe, aligned to a vocab;
- ``study``: one configuration trained and tested (the run cache's ``01_embedding_init`` study);
- ``tables``: the Section 3 grid, seed spread, the paper's claims and the rare-word tables;
- ``extended``: Section 3 and appendix tables (K, vector source, data size), Table 7, the transformer extension;
- ``hpsearch``: the Figure 1 hyperparameter search (optuna) and its ``lmstudy search`` command;
- ``ngram``: KenLM modified Kneser-Ney baselines (Table 7).

Import the submodules; this package imports nothing itself. It uses the core and no other paper's folder.
"""
