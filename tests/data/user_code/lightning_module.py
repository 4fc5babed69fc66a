"""A LightningModule-like class and a callback as users write them."""

from torch import nn


class Classifier(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.net = nn.Linear(n_in, n_out)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log_value("train_loss", loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        acc = (logits.argmax(1) == y).float().mean()
        print("val acc", acc.item())

    def log_value(self, name, value):
        print(name, value)


class EarlyStopping:
    def __init__(self, patience=3):
        self.patience = patience
        self.best = None
        self.bad = 0

    def step(self, val_loss):
        if self.best is None or val_loss < self.best:
            self.best = val_loss
            self.bad = 0
        else:
            self.bad += 1
        return self.bad > self.patience
