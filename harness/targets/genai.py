"""The genai target: onnxruntime-genai, the runtime LLM apps really use, as the peer of the generate
workload (``--peer genai``): it loads the decoder's folder itself (``og.Model``, which reads its
genai_config.json) and runs its own greedy loop (``og.Generator``), timed as the harness times its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from harness.core.errors import InputError


@dataclass
class Generation:
    """One greedy generation: its ids and timings."""

    ids: list[int] = field(default_factory=list)
    ttft_s: float = 0.0  # prefill + the first token
    token_s: list[float] = field(default_factory=list)  # each later token's latency

    @property
    def decode_tokens_per_s(self) -> float | None:
        return len(self.token_s) / sum(self.token_s) if self.token_s and sum(self.token_s) > 0 else None


def require_genai() -> None:
    """InputError in one line when onnxruntime-genai cannot be imported here."""
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError as err:
        raise InputError(
            f"--peer genai: onnxruntime-genai is not installed ({err}; pip install onnxruntime-genai)"
        ) from None


def genai_generate(model, prompt: list[int], new_tokens: int) -> Generation:
    """Greedy ``new_tokens`` after ``prompt`` with genai's own loop: ``append_tokens`` (the
    prefill) and ``generate_next_token``, whose first call picks from the prefill's logits."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
    generator = og.Generator(model, params)
    out = Generation()
    try:
        t0 = time.perf_counter()
        generator.append_tokens(prompt)
        while len(out.ids) < new_tokens and not generator.is_done():
            generator.generate_next_token()
            out.ids.append(int(generator.get_next_tokens()[0]))
            now = time.perf_counter()
            if len(out.ids) == 1:
                out.ttft_s = now - t0
            else:
                out.token_s.append(now - t0)
            t0 = now
    finally:
        del generator  # its KV cache goes with it
    return out
