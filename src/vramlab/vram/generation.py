"""What ``model.generate()`` allocates around the forward passes, by transformers release (greedy search).

:func:`vramlab.vram.dryrun.dry_run` with ``mode="generate"`` runs the real model forward of the installed
transformers on the meta device, and around it :func:`generate_loop` does what the ``generate()`` of the
stated release does with memory (``transformers/generation/utils.py``, ``_sample``). The rules, each with the
release that brought it (:data:`GENERATE_RULES`):

* **logits_to_keep = 1 at prefill** (transformers PR #31292 "Reducing memory usage: removing useless logits
  computation in generate()", in 4.45 as ``num_logits_to_keep``, renamed ``logits_to_keep`` in 4.50): the
  prefill's ``lm_head`` runs on the last token only, for a model whose ``forward`` takes the argument
  (``_supports_logits_to_keep``). Before it, the prefill computes logits for every prompt token.
* **logits upcast in the model** (before 4.45): the Llama-family modelling code ended in
  ``logits = logits.float()`` for every token (:data:`UPCAST_ARCHS`; GPT-2, OPT, GPT-NeoX, GPT-J, BLOOM and
  Falcon never did); #31292 moved the upcast to the loss.
* **the next-token logits** (``next_token_logits``): from 4.47 (PR #34813) ``outputs.logits[:, -1].to(copy=True,
  dtype=torch.float32)``, a float32 [B, V]; 4.45-4.46 cloned the whole logits before slicing (issue #34796);
  4.42-4.44 ``outputs.logits[:, -1, :].clone()`` in the logits' dtype; before 4.42 a view.
* **two copies of the cache and leaked logits** (before 4.42; PR #30536 "Reduce by 2 the memory requirement in
  generate()"): the legacy tuple cache was rebuilt each step (``torch.cat`` into new tensors) while the
  previous step's tuples and ``outputs`` (with its logits) were still referenced, so a decode step held the old
  and the new cache, and the prefill's logits lived into the first decode step. From 4.42 a ``DynamicCache``
  is updated layer by layer and ``del outputs`` ends each step.
* Always: ``attention_mask`` (int64 [B, L], grown by one column per step), ``input_ids`` grown by ``torch.cat``,
  ``unfinished_sequences``, and the argmax. No logits processor runs for plain greedy search with a config's
  default generation settings (none are built).

The attention mask is all ones (no padding), so it is allocated but not passed to the model: transformers then
takes its ``is_causal`` path, as it does on a GPU when it finds the mask all ones.
"""

from __future__ import annotations

import re
from typing import Any, Callable

GENERATE_RULES = {
    "logits_to_keep": ((4, 45), "PR #31292: num_logits_to_keep=1 at prefill (logits_to_keep from 4.50)"),
    "no_upcast_in_model": ((4, 45), "PR #31292: logits.float() only with labels"),
    "next_logits_float32_copy": ((4, 47), "PR #34813: outputs.logits[:, -1].to(copy=True, dtype=float32)"),
    "next_logits_full_clone": ((4, 45), "4.45-4.46: outputs.logits.clone()[:, -1, :].float() (issue #34796)"),
    "next_logits_slice_clone": ((4, 42), "4.42-4.44: outputs.logits[:, -1, :].clone()"),
    "one_cache_copy": ((4, 42), "PR #30536: DynamicCache updated in place, del outputs each step"),
    "no_causal_bias_buffers": ((4, 48), "GPT-2 / GPT-NeoX attention refactors: no per-layer tril buffer"),
}
# model_types whose transformers 4.x modelling code upcast every logit (``logits = logits.float()``) before 4.45
UPCAST_ARCHS = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gemma", "gemma2", "phi3", "starcoder2",
                "cohere", "olmo", "stablelm", "persimmon", "qwen3", "granite", "phi"}


def transformers_release(version: Any = None) -> tuple[int, int]:
    """``(major, minor)`` of a transformers version (``"4.41.2"``, ``"5.24"``); None: the installed one."""
    if version is None:
        import transformers

        version = transformers.__version__
    if isinstance(version, tuple) and len(version) >= 2 and all(isinstance(v, int) for v in version[:2]):
        release = (version[0], version[1])
    else:
        found = re.match(r"\s*(\d{1,2})\.(\d{1,3})", str(version))
        if not found:
            raise ValueError(f"`transformers_version` {version!r} is not a release such as '4.41' or '5.24'.")
        release = (int(found.group(1)), int(found.group(2)))
    if release < (4, 30):
        raise ValueError(f"`transformers_version` {version!r}: the dry run models transformers 4.30 and later.")
    return release


def legacy_buffers(config, release: tuple[int, int]) -> list[tuple[tuple[int, ...], str]]:
    """Buffers the release's modelling code held and 5.x does not: ``(shape, dtype name)`` each.

    Before transformers 4.48 GPT-2's and GPT-NeoX's attention registered a causal ``bias`` buffer per layer,
    ``torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool))`` (modeling_gpt2.py,
    modeling_gpt_neox.py of 4.40), and GPT-NeoX a rotary ``cos_cached`` / ``sin_cached`` [max_positions,
    rotary_ndims] per layer (in the model dtype after ``model.to(float16)``). The refactors to the shared
    attention interface removed them; the release is taken as 4.48 for both (GPT-NeoX's refactor; GPT-2's is
    not pinned here)."""
    if release >= GENERATE_RULES["no_causal_bias_buffers"][0]:
        return []
    kind = getattr(config, "model_type", None)
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    max_pos = int(getattr(config, "max_position_embeddings", 0) or 0)
    out: list[tuple[tuple[int, ...], str]] = []
    if kind in ("gpt2", "gpt_neox") and layers and max_pos:
        out += [((1, 1, max_pos, max_pos), "bool")] * layers
    if kind == "gpt_neox" and layers and max_pos:
        head = config.hidden_size // config.num_attention_heads
        rot = int(head * getattr(config, "rotary_pct", 1.0))
        out += [((1, 1, max_pos, rot), "model")] * (2 * layers)
    return out


def upcasts_logits(model_type: str | None, release: tuple[int, int]) -> bool:
    """Whether that release's modelling code made every logit float32 (``logits.float()``)."""
    return release < GENERATE_RULES["no_upcast_in_model"][0] and (model_type or "") in UPCAST_ARCHS


def keeps_one_logit(model, release: tuple[int, int]) -> bool:
    """Whether that release's ``generate()`` passes ``logits_to_keep=1`` to this model at prefill."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return release >= GENERATE_RULES["logits_to_keep"][0] and "logits_to_keep" in params


def _grow(cache, tokens: int) -> None:
    """Add ``tokens`` positions to every layer of a transformers cache in one ``update`` (its own ``torch.cat``,
    sliding windows cropped by the layer class): what the skipped decode steps would have left."""
    import torch

    for idx, layer in enumerate(getattr(cache, "layers", [])):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or keys.dim() != 4:
            continue
        b, h, _, d = keys.shape
        new_k = keys.new_empty((b, h, tokens, d))
        new_v = values.new_empty((b, values.shape[1], tokens, values.shape[-1]))
        layer.update(new_k, new_v)
        del new_k, new_v


def generate_loop(model, batch_size: int, seq_len: int, new_tokens: int, cache, cache_kw: str,
                  release: tuple[int, int], step: Callable[[str], None], label: Callable[[Any, Any], None],
                  skip_middle: bool = True):
    """Greedy ``generate()`` of ``release`` over ``model`` (module docstring): prefill, then ``new_tokens - 1``
    decode forwards (``generate(max_new_tokens=n)`` runs n forwards: the prefill gives the first token).
    ``step(phase)`` names the phase; ``label(outputs, cache)`` relabels logits and cache after a forward.
    ``skip_middle`` (more than 6 forwards): decode steps 3 to n-2 are not run; the cache takes their tokens in
    one update, so steps 1, 2 and the last (the largest cache) run as they would. Every step's memory grows
    with the cache, so the peak is among the steps that run. Returns the generated ids and the cache."""
    import torch

    device = next(model.parameters()).device
    upcast = upcasts_logits(getattr(model.config, "model_type", None), release)
    one_logit = keeps_one_logit(model, release)
    legacy = release < GENERATE_RULES["one_cache_copy"][0]

    def forward(ids, first: bool):
        kwargs = {cache_kw: cache, "use_cache": True}
        if first and one_logit:
            kwargs["logits_to_keep"] = 1
        out = model(input_ids=ids, **kwargs)
        if upcast:                                  # logits = self.lm_head(h); logits = logits.float()
            low = out.logits
            out.logits = low.float()
            del low
        return out

    def next_logits(out):
        if release >= GENERATE_RULES["next_logits_float32_copy"][0]:
            return out.logits[:, -1].to(copy=True, dtype=torch.float32)
        if release >= GENERATE_RULES["next_logits_full_clone"][0]:
            return out.logits.clone()[:, -1, :].float()
        if release >= GENERATE_RULES["next_logits_slice_clone"][0]:
            return out.logits[:, -1, :].clone()
        return out.logits[:, -1, :]

    with torch.inference_mode():
        step("prefill")
        input_ids = torch.zeros((batch_size, seq_len), dtype=torch.long, device=device)
        attention_mask = torch.ones((batch_size, seq_len), dtype=torch.long, device=device)
        unfinished = torch.ones(batch_size, dtype=torch.long, device=device)
        out = forward(input_ids, True)
        label(out, cache)
        kept_out = None
        n = max(new_tokens, 1)
        skip = (3, n - 2) if (skip_middle and n > 6) else None
        for i in range(n):
            if skip and skip[0] <= i <= skip[1]:
                if i == skip[0]:
                    step(f"decode {skip[0]}-{skip[1]} (not run: cache grown by {skip[1] - skip[0] + 1} tokens at once)")
                    _grow(cache, skip[1] - skip[0] + 1)      # the skipped steps' tokens, added in one update
                    label(None, cache)
                    input_ids = torch.cat([input_ids, input_ids.new_zeros((batch_size, skip[1] - skip[0] + 1))], -1)
                    attention_mask = torch.cat([attention_mask, attention_mask.new_ones(
                        (batch_size, skip[1] - skip[0] + 1))], dim=-1)
                continue
            if i:
                step(f"decode {i}")
                old = [t for layer in getattr(cache, "layers", []) for t in vars(layer).values()
                       if isinstance(t, torch.Tensor)] if legacy else None
                kept_out = out if legacy else None    # before 4.42 the previous outputs outlive the step
                out = None
                out = forward(input_ids[:, -1:], False)
                label(out, cache)
                del old
                kept_out = None
            scores = next_logits(out)
            nxt = torch.argmax(scores, dim=-1)
            del scores
            input_ids = torch.cat([input_ids, nxt[:, None]], dim=-1)
            del nxt
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((batch_size, 1))], dim=-1)
            if not legacy:
                out = None                            # del outputs
        del kept_out, unfinished, attention_mask
        step("end")
    return input_ids, cache


__all__ = ["GENERATE_RULES", "UPCAST_ARCHS", "transformers_release", "legacy_buffers", "upcasts_logits", "keeps_one_logit",
           "generate_loop"]
