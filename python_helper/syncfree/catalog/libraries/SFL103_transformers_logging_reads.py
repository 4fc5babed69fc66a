'''## What it does
At each logging step the transformers `Trainer` reads the accumulated loss and the gradient norm back as Python
numbers (`Trainer._maybe_log_save_evaluate`: `.mean().item()`, `grad_norm.item()`); with
`include_num_input_tokens_seen` it also reads the token count of every step (`Trainer._track_num_input_tokens`).

## Why is this bad?
Each `.item()` waits for the GPU. Logged every step (`logging_steps=1`) the reads stall every step; the token count
is read every step whatever `logging_steps` is.

## Example
```python
args = TrainingArguments(output_dir="out", logging_steps=1, include_num_input_tokens_seen=True)
```

## Use instead
Log every few dozen steps (the loss is accumulated on the GPU in between) and leave the token count off unless you
need it.
```python
args = TrainingArguments(output_dir="out", logging_steps=50)
```

## Fix safety
Options of the library: fewer logged points.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL103",
    name="transformers-logging-reads",
    title="The transformers Trainer reads the loss, grad norm and token count on the CPU to log them",
    package="transformers",
    kind="item",
    how_often="every logging step (logging_steps); the token count every step",
    switch="TrainingArguments(logging_steps=50) and include_num_input_tokens_seen=False",
    sites=(LibrarySite("transformers/trainer.py", "Trainer._maybe_log_save_evaluate"),
           LibrarySite("transformers/trainer.py", "Trainer._track_num_input_tokens")),
)
