"""The web app's pieces; ``app.py`` only lays out the page and wires its events to them.

Pure (no Gradio):

- :mod:`estimator_app.fields`: the form's fields, defined once: order (the share link's), labels,
  and the core option each one sets.
- :mod:`estimator_app.form`: the form's state, share-link query parameters (parsing with notices,
  building), and the keyword arguments for :func:`estimator.estimate`.
- :mod:`estimator_app.values`: each field's parser (a link's text, a widget's value) and the vocabularies.
- :mod:`estimator_app.chart`: the stacked bar chart's DataFrame.
- :mod:`estimator_app.tables`: the results table in human units, the method note, downloads.
- :mod:`estimator_app.posting`: a result as a Hub discussion (title, body) and the posting flow
  (duplicate check, post) over :mod:`estimator.source.hub`.
- :mod:`estimator_app.wording`: how the page words the core's errors (form labels, not CLI flags).
- :mod:`estimator_app.lanes`: admission (workers, the builder lane, queue size).
- :mod:`estimator_app.answers`: one request's estimate and its renderings, cached.
- :mod:`estimator_app.howmany`: "How many GPUs do I need?" for the form's request, and its answer in words.

Gradio's side: :mod:`estimator_app.layout` (the form's and the result area's widgets),
:mod:`estimator_app.handlers` (the event handlers) and
:mod:`estimator_app.environment` (process settings ``app.py`` applies before anything imports
``huggingface_hub``). The "fits on" GPU table is the core's :mod:`estimator.fit.gpus`.
"""
