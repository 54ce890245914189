"""Run the ``hf-mem`` CLI against the Hub stand-in: ``python bench/_hfmem_loopback.py --model-id ORG/NAME``.

hf-mem (``pip install hf-mem``; 0.5.6 measured) writes ``https://huggingface.co`` into every URL and reads no
``HF_ENDPOINT``, so this sends each of its requests for that host to ``HF_ENDPOINT`` instead (the same path and query,
on its own ``httpx2.AsyncClient``); nothing else of hf-mem changes. A helper of ``bench/load_vs_hfmem.py``.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def main() -> None:
    import httpx2

    target = httpx2.URL(os.environ["HF_ENDPOINT"])
    send = httpx2.AsyncClient.send

    async def to_standin(self: Any, request: Any, **kwargs: Any) -> Any:
        if request.url.host == "huggingface.co":
            request.url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
            request.headers["Host"] = f"{target.host}:{target.port}"
        return await send(self, request, **kwargs)

    httpx2.AsyncClient.send = to_standin  # type: ignore[method-assign]
    from hf_mem.cli import main as hf_mem_main

    sys.argv = ["hf-mem", *sys.argv[1:]]
    hf_mem_main()


if __name__ == "__main__":
    main()
