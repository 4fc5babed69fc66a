"""Known library syncs and their switches (syncfree/catalog/libraries), measured on a GPU.

Each test runs a tiny workload (random model, random data, no downloads) under
``syncfree.watch()`` twice, before and after the entry's switch, and prints one
``syncfree-gpu: SFLnnn ...`` line with the counts: the syncs the entry names (sites whose
library line carries the entry) and all syncs of the block. Needs transformers, lightning,
accelerate and torchmetrics where the entry is theirs (skipped, with the reason, otherwise).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import syncfree  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def measure(run) -> tuple[int, dict[str, int]]:
    """(syncs of the block, syncs per library entry code)."""
    with syncfree.watch("warn", measure_blocked=False) as w:
        run()
        torch.cuda.synchronize()
    by_entry: dict[str, int] = {}
    for site in w.report.sites + w.report.allowed:
        entry = site.library.entry if site.library is not None else None
        if entry:
            by_entry[entry] = by_entry.get(entry, 0) + site.count
    return w.report.syncs - 1, by_entry  # less the closing synchronize


def report(code: str, before: tuple[int, dict], after: tuple[int, dict]) -> None:
    print(f"syncfree-gpu: {code} entry syncs before={before[1].get(code, 0)} after={after[1].get(code, 0)}; "
          f"all syncs before={before[0]} after={after[0]}")


# --------------------------------------------------------------------------- transformers


def _trainer(tmp_path, attention_mask=False, **args):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    data = [{"input_ids": ids, "labels": ids, **({"attention_mask": torch.ones_like(ids)} if attention_mask else {})}
            for ids in torch.randint(0, 128, (64, 16))]
    defaults = dict(output_dir=str(tmp_path), max_steps=8, per_device_train_batch_size=4, report_to=[],
                    save_strategy="no", logging_steps=50, disable_tqdm=True)
    arguments = transformers.TrainingArguments(**{**defaults, **args})
    return transformers.Trainer(model=model, args=arguments, train_dataset=data)


@pytest.mark.parametrize("code,before,after", [
    ("SFL101", {}, {"logging_nan_inf_filter": False}),
    ("SFL102", {"dataloader_pin_memory": False},
     {"dataloader_pin_memory": True, "accelerator_config": {"non_blocking": True}}),
    ("SFL103", {"logging_steps": 1, "include_num_input_tokens_seen": True}, {"logging_steps": 50}),
])
def test_transformers_trainer_switches(tmp_path, code, before, after):
    first = _trainer(tmp_path, **before)
    counts_before = measure(first.train)
    second = _trainer(tmp_path, **after)
    counts_after = measure(second.train)
    report(code, counts_before, counts_after)
    assert counts_before[1].get(code, 0) >= 8 if code != "SFL103" else counts_before[1].get(code, 0) > 0
    assert counts_after[1].get(code, 0) < counts_before[1].get(code, 0)
    assert counts_after[0] < counts_before[0]


def test_transformers_attention_mask_swaps_one_check_for_another(tmp_path):
    """SFL104 names no switch: an attention_mask removes the packed-sequence check and brings the SDPA padding
    check. Both runs copy their batches without blocking, so the mask's own copy does not count (like with like)."""
    copies = {"dataloader_pin_memory": True, "accelerator_config": {"non_blocking": True}}
    counts_before = measure(_trainer(tmp_path, **copies).train)
    counts_after = measure(_trainer(tmp_path, attention_mask=True, **copies).train)
    report("SFL104", counts_before, counts_after)
    assert counts_before[1].get("SFL104", 0) >= 8 and counts_after[1].get("SFL104", 0) >= 8
    assert counts_after[0] >= counts_before[0]


# --------------------------------------------------------------------------- lightning


def _fit(tmp_path, *, prog_bar: bool, log_every_n_steps: int):
    L = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import CSVLogger

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(16, 4)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.layer(x), y)
            self.log("train_loss", loss, prog_bar=prog_bar, on_step=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    trainer = L.Trainer(max_steps=8, accelerator="gpu", devices=1, logger=CSVLogger(str(tmp_path)),
                        log_every_n_steps=log_every_n_steps, enable_checkpointing=False,
                        enable_model_summary=False)
    return lambda: trainer.fit(Tiny(), loader)


def test_lightning_progress_bar_metrics(tmp_path):
    before = measure(_fit(tmp_path, prog_bar=True, log_every_n_steps=50))
    after = measure(_fit(tmp_path, prog_bar=False, log_every_n_steps=50))
    report("SFL201", before, after)
    assert before[1].get("SFL201", 0) >= 8 and after[1].get("SFL201", 0) == 0


def test_lightning_logger_metrics(tmp_path):
    before = measure(_fit(tmp_path, prog_bar=False, log_every_n_steps=1))
    after = measure(_fit(tmp_path, prog_bar=False, log_every_n_steps=50))
    report("SFL202", before, after)
    assert before[1].get("SFL202", 0) > after[1].get("SFL202", 0)


# --------------------------------------------------------------------------- accelerate


def test_accelerate_non_blocking_batches():
    accelerate = pytest.importorskip("accelerate")
    from accelerate.utils import DataLoaderConfiguration

    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))

    def loop(non_blocking: bool):
        config = DataLoaderConfiguration(non_blocking=non_blocking)
        accelerator = accelerate.Accelerator(dataloader_config=config)
        loader = accelerator.prepare(torch.utils.data.DataLoader(data, batch_size=8, pin_memory=non_blocking))
        return lambda: [x.sum() for x, _ in loader]

    before, after = measure(loop(False)), measure(loop(True))
    report("SFL301", before, after)
    assert before[1].get("SFL301", 0) >= 8 and after[1].get("SFL301", 0) == 0


# --------------------------------------------------------------------------- torchmetrics


def test_torchmetrics_validate_args_adds_no_sync():
    pytest.importorskip("torchmetrics")
    from torchmetrics.classification import MulticlassAccuracy

    preds = [torch.randn(32, 4, device="cuda") for _ in range(8)]
    target = [torch.randint(0, 4, (32,), device="cuda") for _ in range(8)]

    def loop(validate_args: bool, call: bool = False):
        def run():
            metric = MulticlassAccuracy(num_classes=4, validate_args=validate_args).cuda()
            for p, t in zip(preds, target):
                (metric if call else metric.update)(p, t)
            metric.compute()
        return run

    # Measured on an H100 (torchmetrics 1.9): 25 syncs with metric(p, t), with update(), and with
    # validate_args=False alike: the input checks add no sync, so the catalog has no torchmetrics entry
    # (an SFL401 that named validate_args=False as the switch was dropped). The syncs are the update's
    # own counting, which no option turns off.
    called = measure(loop(True, call=True))
    before, after = measure(loop(True)), measure(loop(False))
    print(f"syncfree-gpu: torchmetrics MulticlassAccuracy, 8 updates + compute: validate_args=True {before[0]}, "
          f"validate_args=False {after[0]}, metric(p, t) each step {called[0]}")
    assert called[0] == before[0] == after[0]


# --------------------------------------------------------------------------- torch's own


def test_torch_save_of_a_cuda_state_dict(tmp_path):
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(10)]).cuda()

    def direct():
        torch.save(model.state_dict(), tmp_path / "a.pt")

    def batched():
        state = {k: v.to("cpu", non_blocking=True) for k, v in model.state_dict().items()}
        torch.cuda.current_stream().synchronize()
        torch.save(state, tmp_path / "b.pt")

    before, after = measure(direct), measure(batched)
    report("SFL501", before, after)
    assert before[0] >= 20 and after[0] <= 1


def test_grad_scaler_against_bf16():
    model = torch.nn.Linear(16, 4).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16, device="cuda")

    def fp16():
        scaler = torch.amp.GradScaler("cuda")
        for _ in range(8):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()

    def bf16():
        for _ in range(8):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()

    before, after = measure(fp16), measure(bf16)
    report("SFL502", before, after)
    assert before[0] >= 8 and after[0] == 0


def test_clip_grad_norm_nonfinite_check():
    model = torch.nn.Linear(16, 4).cuda()
    model(torch.randn(8, 16, device="cuda")).sum().backward()

    def checked():
        for _ in range(8):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)

    def unchecked():
        for _ in range(8):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

    before, after = measure(checked), measure(unchecked)
    report("SFL503", before, after)
    assert before[0] >= 8 and after[0] == 0


def test_dataloader_pinned_non_blocking_copies():
    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))

    def loop(pin: bool):
        loader = torch.utils.data.DataLoader(data, batch_size=8, pin_memory=pin)
        return lambda: [(x.to("cuda", non_blocking=pin), y.to("cuda", non_blocking=pin)) for x, y in loader]

    before, after = measure(loop(False)), measure(loop(True))
    report("SFL504", before, after)
    assert before[0] >= 16 and after[0] < before[0]


# --------------------------------------------------------------------------- the framework example


def _run_example(*flags: str) -> tuple[list[tuple[int, str]], int, str]:
    """(rows as (count, library line or ""), the total of the summary, stdout) of `syncfree run
    examples/trainer_gpt2.py` in text."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("transformers")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "syncfree", "run", "examples/trainer_gpt2.py", *flags], cwd=root,
                          env={**os.environ, "NO_COLOR": "1"}, capture_output=True, text=True, timeout=600)
    lines = done.stdout.splitlines()
    rows = []
    for i, line in enumerate(lines):
        # The first "×N" is the row's count ("then 0.15 ms per sync ×15" follows it on a GPU).
        found = re.match(r"examples/trainer_gpt2\.py:\d+:\d+: .*? ×(\d+)", line)
        if found:
            inside = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("    inside ") else ""
            rows.append((int(found.group(1)), inside))
    total = int(re.search(r"^(\d+) syncs? at", done.stdout, re.MULTILINE).group(1))
    return rows, total, done.stdout


def test_the_trainer_example_names_the_switch_and_loses_nothing():
    rows, total, out = _run_example()
    fixed_rows, fixed_total, _ = _run_example("--no-nan-filter")
    nan_rows = [count for count, inside in rows if "SFL101" in inside]
    print(f"syncfree-gpu: examples/trainer_gpt2.py syncs={total} NaN-check syncs={sum(nan_rows)}; "
          f"with logging_nan_inf_filter=False syncs={fixed_total}")
    print(out)
    assert sum(count for count, _ in rows) == total  # regrouping by library line loses and doubles nothing
    # Measured: the per-step NaN check keeps its first call apart, and the summary lists the first calls' total.
    lines = out.splitlines()
    nan_line = next(line for line, below in zip(lines, lines[1:])
                    if line.startswith("examples/trainer_gpt2.py") and "SFL101" in below)
    assert "(first sync " in nan_line and "per sync ×" in nan_line, nan_line
    assert "ranked by blocked time after the first call" in out and "at the first call of each repeated one" in out
    assert nan_rows and sum(nan_rows) >= 8
    assert not any("SFL101" in inside for _, inside in fixed_rows)
    assert fixed_total <= total - sum(nan_rows)
