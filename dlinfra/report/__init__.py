"""``dlinfra report``: honest comparisons of layers from the results store.

frame (store -> tidy frames), stats (summaries, intervals), views (the tables),
warnings (caveats and refusals), render (table/markdown/csv/json), html (one
self-contained page), seeds (the seed studies' published figures), build
(store -> Report). Nothing here imports TensorFlow.
"""

#: The seed studies ``seed_figures.json`` holds figures for: ``--compare-seed``'s choices. Here, not in
#: ``seeds``, so the CLI can offer them without importing pandas.
SEEDS = ("000", "001", "002", "003", "004")
