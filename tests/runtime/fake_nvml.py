"""A stand-in for pynvml with the functions fwbench.runtime.gpu uses, so GPU telemetry can be
tested (and its exposition linted) on a machine without a GPU. Units as NVML's: milliwatts,
millijoules, megahertz, degrees Celsius, bytes, percent."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's name)
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    pass


@dataclass
class FakeGpu:
    name: str
    uuid: str
    utilization_percent: int = 0
    memory_used: int = 0
    memory_total: int = 80 * 2**30
    power_milliwatts: int = 0
    energy_millijoules: int | None = 0  # None: the device does not support the counter
    sm_clock_megahertz: int = 1980
    temperature: int = 40


class FakeNvml:
    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpus: list[FakeGpu], init_error: Exception | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.init_calls = 0

    def nvmlInit(self) -> None:  # noqa: N802
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:  # noqa: N802
        return gpu.name

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:  # noqa: N802
        return gpu.uuid

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=gpu.utilization_percent, memory=0)

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> SimpleNamespace:  # noqa: N802
        free = gpu.memory_total - gpu.memory_used
        return SimpleNamespace(total=gpu.memory_total, used=gpu.memory_used, free=free)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:  # noqa: N802
        return gpu.power_milliwatts

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:  # noqa: N802
        if gpu.energy_millijoules is None:
            raise NVMLError_NotSupported("Not Supported")
        return gpu.energy_millijoules

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, clock: int) -> int:  # noqa: N802
        assert clock == self.NVML_CLOCK_SM
        return gpu.sm_clock_megahertz

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:  # noqa: N802
        assert sensor == self.NVML_TEMPERATURE_GPU
        return gpu.temperature


def two_gpus() -> FakeNvml:
    """An H100 with every reading, and an older card without the energy counter."""
    return FakeNvml(
        [
            FakeGpu(
                "NVIDIA H100 80GB HBM3",
                "GPU-11111111-2222-3333-4444-555555555555",
                utilization_percent=87,
                memory_used=12 * 2**30,
                power_milliwatts=312_500,
                energy_millijoules=5_000_000,
                sm_clock_megahertz=1980,
                temperature=61,
            ),
            FakeGpu(
                "Tesla P4",
                "GPU-66666666-7777-8888-9999-000000000000",
                utilization_percent=0,
                memory_total=8 * 2**30,
                power_milliwatts=24_000,
                energy_millijoules=None,
                sm_clock_megahertz=1114,
                temperature=35,
            ),
        ]
    )
