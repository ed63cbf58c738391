"""One module per study: its config, its experiment grid and its table builders.

Notebooks call these; the modules never import from notebooks or the app.
"""
