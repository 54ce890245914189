"""Remote code placeholder served by the Hub stand-in. It must never be executed by the estimator."""
raise RuntimeError("remote code must not be executed")
