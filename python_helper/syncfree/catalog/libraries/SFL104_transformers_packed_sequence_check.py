'''## What it does
A transformers model given `position_ids` but no `attention_mask` (and no cache) checks whether the batch packs several
sequences per row (`masking_utils.find_packed_sequence_indices`: `if ... (packed_sequence_mask[:, -1] == 0).all():`),
a Python condition on a CUDA tensor, at every forward pass. The Trainer's default collator passes batches through as
they are, so a dataset without an `attention_mask` pays it every step.

## Why is this bad?
The condition needs the tensor's value: the CPU waits for the GPU at every forward pass, before the attention mask is
even built.

## Example
```python
data = [{"input_ids": ids, "labels": ids} for ids in token_batches]
```

## Use instead
Give the model an attention mask (a tokenizer returns one; for unpadded data it is all ones): with a 2D mask the check
does not run.
```python
data = [{"input_ids": ids, "labels": ids, "attention_mask": torch.ones_like(ids)} for ids in token_batches]
```

## Fix safety
A change of the data: the mask must mark the real tokens (all ones for unpadded rows).
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL104",
    name="transformers-packed-sequence-check",
    title="A transformers model without an attention mask checks for packed sequences on the CPU",
    package="transformers",
    kind="python_bool",
    how_often="every forward pass without an attention_mask",
    switch="pass an attention_mask with each batch",
    sites=(LibrarySite("transformers/masking_utils.py", "find_packed_sequence_indices"),),
)
