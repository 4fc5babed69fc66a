"""A Lightning Trainer.fit of a tiny module on the GPU: a logged loss and a logged torchmetrics metric,
four training batches and two validation ones. A workload of tests/gpu/test_workloads_gpu.py."""

import lightning as L
import torch
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        self.acc = torchmetrics.classification.MulticlassAccuracy(num_classes=4)
    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        self.acc(logits, y)
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_acc", self.acc, on_step=True, on_epoch=True)
        return loss
    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("val_loss", loss)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

ds = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
dl = DataLoader(ds, batch_size=16)
vdl = DataLoader(ds, batch_size=32)
trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=1, limit_train_batches=4, limit_val_batches=2,
                    enable_progress_bar=False, logger=False, enable_checkpointing=False, enable_model_summary=False,
                    num_sanity_val_steps=0)
trainer.fit(Tiny(), dl, vdl)
print(trainer.callback_metrics)
