"""Krony-PT 2024: Kronecker-factored GPT-2 MLPs (notebook 03).

- ``model``: the Kronecker-factored MLP layer, Van Loan / pruning / random initialisation, ``compress``;
- ``table``: the paper's parameter Tables 1 and 2 recomputed from GPT-2 small's config (``lmstudy krony table``);
- ``study``: compression classes, continued training, the fair dense and distilled baselines, Table 6;
- ``cli``: the ``lmstudy krony`` commands.

Import the submodules; this package imports nothing itself. It uses the core and no other paper's folder.
"""
