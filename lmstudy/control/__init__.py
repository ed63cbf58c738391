"""The CTRL control-code study (Keskar et al. 2019): control codes and their data (``codes``,
``data``), the model (``model``), penalised sampling (``sampling``), batched multi-code generation
(``generation``), source attribution (``attribution``) and the ``generate`` / ``attribute``
commands (``cli``). Import the submodules; this package imports nothing heavy itself."""
