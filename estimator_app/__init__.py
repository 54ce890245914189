"""The web app's pieces, each a small pure module the Gradio page (``app.py``) wires together.

- :mod:`estimator_app.form`: the form's state, share-link query parameters (parsing with notices,
  building), and the keyword arguments for :func:`estimator.estimate`.
- :mod:`estimator_app.gpus`: common GPUs, their stated memory in bytes, and the "fits on" table.
- :mod:`estimator_app.chart`: the stacked bar chart's DataFrame.
- :mod:`estimator_app.tables`: the results table in human units, the method note, downloads.

Nothing here imports Gradio; ``app.py`` is the only adapter.
"""
