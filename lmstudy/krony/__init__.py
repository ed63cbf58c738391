"""Krony-PT 2024: Kronecker-factored GPT-2 MLPs (notebook 03).

- ``model``: the Kronecker-factored MLP layer, Van Loan / pruning / random initialisation, ``compress``;
- ``table``: the paper's parameter Tables 1 and 2 recomputed from GPT-2 small's config (``lmstudy krony table``);
- ``fused``, ``export``: the layer's fused CPU kernel; a Krony model as a Hugging Face folder;
- the study on the shared base, by job: ``classes`` (the size classes' factor shapes, the matched dense width),
  ``config`` (its settings, one model's spec), ``bases`` (the base's checkpoints and streams), ``baselines`` (the
  distilled student's start and the equal-data scratch arm), ``distillation`` (the KD loss and task), ``runs`` (each
  model's initial weights, continued training and scores), ``study_tables`` (the base table, the grid, Table 6, the
  trend and its gaps), ``order`` (what runs in what order; the run list of a second worker), ``claims``,
  ``plots``, ``reconstruction`` (Van Loan's error against the SVD bound);
- ``cli``: the ``lmstudy krony`` commands.

Import the submodules; this package imports nothing itself. It uses the core and no other paper's folder.
"""
