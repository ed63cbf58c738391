"""Model variants built on Hugging Face GPT-2 (and the AWD-LSTM), one idea per module.

- ``kronecker``: Kronecker-factored GPT-2 MLPs (Krony-PT), Van Loan / pruning / random initialisation,
  ``compress`` / ``decompress`` of a ``GPT2LMHeadModel``.

Import from the submodules (``from lmstudy.models.kronecker import compress``); this file stays light so
that importing one model never pulls in the others.
"""
