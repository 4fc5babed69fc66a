'''## What it does
A transformers model reads its attention inputs on the host at every forward pass to pick the attention mask, in
`masking_utils.create_causal_mask`. Without an `attention_mask` (and with no cache, as in training) it checks whether
the batch packs several sequences per row (`find_packed_sequence_indices`:
`if ... (packed_sequence_mask[:, -1] == 0).all():`); with one, the default SDPA attention checks whether the mask has
any padding, to skip it (`_ignore_causal_mask_sdpa`: `padding_mask.all()`). Either is a Python condition on a CUDA
tensor.

## Why is this bad?
The condition needs the tensor's value: the CPU waits for the GPU at every forward pass, before the attention is even
built. Measured on an H100 (GPT-2 under the `Trainer`, 8 steps): 8 syncs from the packed-sequence check without a
mask; with an all-ones `attention_mask` that check is gone but the padding check takes its place, and the mask's own
copy to the GPU adds one more per step (42 syncs without the mask, 50 with it).

## Example
```python
data = [{"input_ids": ids, "labels": ids} for ids in token_batches]
```

## Use instead
No option of the library avoids it in the default attention: passing an `attention_mask` swaps one check for the
other. Count it as one sync per forward pass, and do not add a mask to avoid it.
```python
data = [{"input_ids": ids, "labels": ids} for ids in token_batches]  # one check per forward pass either way
```

## Fix safety
Nothing to change.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL104",
    name="transformers-attention-mask-checks",
    title="A transformers model checks its attention inputs on the CPU at each forward pass",
    package="transformers",
    kind="python_bool",
    how_often="every forward pass",
    switch="none in the default (SDPA) attention: an attention_mask replaces the packed-sequence check by a padding check",
    # transformers/masking_utils.py (5.x): the two checks create_causal_mask makes before it builds a mask. The
    # padding check syncs in its caller's `if` (sdpa_mask, named by torch version in some releases), after
    # _ignore_causal_mask_sdpa has returned its tensor: matched by the call in the condition.
    sites=(LibrarySite("transformers/masking_utils.py", "find_packed_sequence_indices"),
           LibrarySite("transformers/masking_utils.py", None, r"_ignore_causal_mask_sdpa\(")),
)
