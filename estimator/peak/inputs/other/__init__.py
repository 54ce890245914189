"""Models with inputs of their own: codecs' and time-series workloads (workloads, models, series), Evolla's protein (protein), text encoders that ask about their inputs (encoders)."""
