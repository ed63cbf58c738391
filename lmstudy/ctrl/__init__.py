"""Keskar et al. 2019, CTRL: control-code conditional generation (notebook 04 and ``app.py``).

- ``codes``, ``data``: the control codes, their documents, the code-mixed training stream and its task;
- ``model``: the control-code GPT-2 (two arms: fine-tuned from the shared base, or its architecture from
  random weights), trained and exported as a Hugging Face folder;
- ``sampling``: penalised sampling (the paper's repetition penalty) as ``LogitsProcessor`` s;
- ``generation``: batched generation under several codes; ``attribution``: source attribution by Bayes' rule;
- ``study``: the notebook's tables (code steering, attribution accuracy, the penalty sweep);
- ``serving``: what the Gradio app calls; ``cli``: the ``generate`` / ``attribute`` commands.

Import the submodules; this package imports nothing heavy itself. It uses the core and no other paper's folder.
"""
