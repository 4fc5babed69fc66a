"""capture/gpupower.py against a stand-in for NVML (libnvidia-ml.so.1 is not on a machine without an NVIDIA driver;
tests/gpu/test_cost_gpu.py reads the real one): which readings make the power of a cost trace."""

import ctypes

import pytest

from syncfree.capture import gpupower


class FakeNvml:
    """NVML's calls that gpupower makes, answering from Python: counters that move by ``step`` between reads, and the
    driver's power samples (wall-clock us, mW)."""

    def __init__(self, samples, energy_step_mj=1000, held_step_ns=0, limit_mw=700_000, samples_status=0):
        self.samples = samples
        self.energy = 0
        self.held = 0
        self.energy_step, self.held_step, self.limit = energy_step_mj, held_step_ns, limit_mw
        self.samples_status = samples_status

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus, handle):
        handle._obj.value = 7
        return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, handle, energy):
        energy._obj.value = self.energy
        self.energy += self.energy_step
        return 0

    def nvmlDeviceGetViolationStatus(self, handle, policy, violation):
        violation._obj.violation_time = self.held
        self.held += self.held_step
        return 0

    def nvmlDeviceGetEnforcedPowerLimit(self, handle, limit):
        limit._obj.value = self.limit
        return 0

    def nvmlDeviceGetSamples(self, handle, kind, since, value_type, count, samples):
        assert kind == 0  # the GPU's total power
        if self.samples_status:
            return self.samples_status
        mine = [(ts, mw) for ts, mw in self.samples if ts > since.value]
        value_type._obj.value = 1  # unsigned int
        if samples is None:
            count._obj.value = len(mine)
            return 0
        for i, (ts, mw) in enumerate(mine[:count._obj.value]):
            samples[i].timestamp = ts
            samples[i].value.ui = mw
        count._obj.value = min(len(mine), count._obj.value)
        return 0


@pytest.fixture
def nvml(monkeypatch):
    def install(fake, seconds=0.3):
        monkeypatch.setattr(gpupower, "_library", lambda: fake)
        monkeypatch.setattr(gpupower, "_handle", lambda lib, device: ctypes.c_void_p(7))
        clock = {"perf": 100.0, "wall": 1_000.0}
        monkeypatch.setattr(gpupower.time, "perf_counter", lambda: clock["perf"])
        monkeypatch.setattr(gpupower.time, "time", lambda: clock["wall"])
        window = gpupower.PowerWindow()
        window.start(0)
        clock["perf"] += seconds
        clock["wall"] += seconds
        return window.stop(0)
    return install


def _samples(watts, start_s=1_000.0, every_s=0.02):
    return [(int((start_s + every_s * (i + 1)) * 1e6), int(w * 1000)) for i, w in enumerate(watts)]


def test_the_samples_at_the_limit_are_the_held_share_and_their_mean_the_draw_over_a_short_window(nvml):
    # 0.3 s: the energy counter says 3333 W (its resolution), the samples 15 readings around the limit, 3 below it
    power = nvml(FakeNvml(_samples([690, 700, 672, 710, 560] * 3), energy_step_mj=1000, held_step_ns=0))
    assert power.at_limit_share == pytest.approx(12 / 15) and power.held_share == pytest.approx(12 / 15)
    assert power.average_w == pytest.approx((690 + 700 + 672 + 710 + 560) / 5) and power.limit_w == 700.0
    assert power.capped_share == 0.0  # NVML's own count, kept for the record


def test_samples_before_the_window_are_not_the_windows(nvml):
    early = _samples([200] * 10, start_s=990.0)
    power = nvml(FakeNvml(early + _samples([695] * 10)))
    assert power.at_limit_share == 1.0


def test_without_samples_the_counters_decide_as_before(nvml):
    power = nvml(FakeNvml([], energy_step_mj=150, held_step_ns=300_000_000), seconds=0.3)  # 0.5 W: under half the limit
    assert power.at_limit_share is None and power.average_w == pytest.approx(0.5) and power.held_share == 0.0
    power = nvml(FakeNvml([], samples_status=3, energy_step_mj=200_000, held_step_ns=150_000_000), seconds=0.3)
    assert power.at_limit_share is None and power.average_w == pytest.approx(666.7, abs=0.1)
    assert power.held_share == pytest.approx(0.5)


def test_a_long_window_keeps_the_energy_counters_draw(nvml):
    # 5 s: the driver's buffer holds only the last few seconds; the energy counter's mean is the draw
    power = nvml(FakeNvml(_samples([695] * 100, start_s=1_003.0), energy_step_mj=2_500_000), seconds=5.0)
    assert power.average_w == pytest.approx(500.0) and power.at_limit_share == 1.0
