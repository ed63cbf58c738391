"""lmstudy: a low-compute language-modelling workbench.

Four papers reproduced with one small package: models, data readers, training and evaluation
live here; notebooks in `notebooks/` and `app.py` only call into it.
"""

__version__ = "0.1.0"
