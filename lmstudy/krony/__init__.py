"""Krony-PT 2024: Kronecker-factored GPT-2 MLPs (notebook 03).

- ``model``: the Kronecker-factored MLP layer, Van Loan / pruning / random initialisation, ``compress``;
- ``table``: the paper's parameter Tables 1 and 2 recomputed from GPT-2 small's config (``lmstudy krony table``);
- ``study``: the study on the shared base: compression classes, the distilled and equal-data dense baselines,
  the trend over the base's checkpoints, Table 6, claims;
- ``published``: the earlier study on the old Wikipedia base, kept so its archived cpu runs replay unchanged;
- ``cli``: the ``lmstudy krony`` commands.

Import the submodules; this package imports nothing itself. It uses the core and no other paper's folder.
"""
