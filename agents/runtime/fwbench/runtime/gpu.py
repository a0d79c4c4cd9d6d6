"""NVIDIA GPU telemetry through NVML (`nvidia-ml-py`, imported as `pynvml`).

One series per device NVML sees, labelled `gpu` = NVML's device index. NVML ignores
CUDA_VISIBLE_DEVICES, so an agent reports every GPU of its host (or of its container, where
the NVIDIA runtime's NVIDIA_VISIBLE_DEVICES decides), not only the ones its framework uses;
NVML's index follows PCI bus order like nvidia-smi, which matches CUDA's numbering only with
CUDA_DEVICE_ORDER=PCI_BUS_ID: join on `uuid` to be sure.

NVML is initialised once, at the first scrape. Where the library, the driver or a GPU is
missing, the collector yields nothing, for good and silently (a CPU agent is not in error).
A reading a device does not support (NVMLError_NotSupported) or refuses leaves out that one
series; it never fails the scrape. The metric names are a contract: the collector joins
them into the results table."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector


class Nvml(Protocol):
    """The part of pynvml this module uses (a fake implements it in tests)."""

    NVMLError: type[Exception]
    NVML_CLOCK_SM: int
    NVML_TEMPERATURE_GPU: int

    def nvmlInit(self) -> None: ...  # noqa: N802 (NVML's own names)
    def nvmlDeviceGetCount(self) -> int: ...  # noqa: N802
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...  # noqa: N802
    def nvmlDeviceGetName(self, handle: Any) -> str: ...  # noqa: N802
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...  # noqa: N802
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...  # noqa: N802
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...  # noqa: N802
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...  # noqa: N802
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int: ...  # noqa: N802
    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int: ...  # noqa: N802
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...  # noqa: N802


Reading = Callable[[Nvml, Any], float]

# name, help, reading in base units; every one a gauge labelled by `gpu`.
GAUGES: tuple[tuple[str, str, Reading], ...] = (
    (
        "fwbench_gpu_utilization_ratio",
        "Fraction of the last sample period in which a kernel ran on the GPU (NVML), 0 to 1",
        lambda nvml, h: nvml.nvmlDeviceGetUtilizationRates(h).gpu / 100,
    ),
    (
        "fwbench_gpu_memory_used_bytes",
        "GPU memory in use, all processes",
        lambda nvml, h: float(nvml.nvmlDeviceGetMemoryInfo(h).used),
    ),
    (
        "fwbench_gpu_memory_total_bytes",
        "GPU memory in all",
        lambda nvml, h: float(nvml.nvmlDeviceGetMemoryInfo(h).total),
    ),
    (
        "fwbench_gpu_power_watts",
        "Power draw of the GPU board",
        lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h) / 1000,  # mW
    ),
    (
        "fwbench_gpu_sm_clock_hertz",
        "Current SM clock",
        lambda nvml, h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM) * 1e6,  # MHz
    ),
    (
        "fwbench_gpu_temperature_celsius",
        "GPU die temperature",
        lambda nvml, h: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
    ),
)


def _energy_joules(nvml: Nvml, handle: Any) -> float:
    return nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000  # mJ


def _import_pynvml() -> Nvml:
    return cast(Nvml, importlib.import_module("pynvml"))


class GpuCollector(Collector):
    """GPU series for every device NVML sees; nothing where NVML is unavailable.

    nvml: pynvml or a stand-in; None imports pynvml at the first scrape."""

    def __init__(self, nvml: Nvml | None = None) -> None:
        self._nvml = nvml
        self._devices: list[tuple[str, Any]] | None = None  # (index label, handle)
        self._info: list[tuple[str, str, str]] = []  # (index label, name, uuid)
        self._lock = threading.Lock()

    def _open(self) -> list[tuple[str, Any]]:
        """Initialises NVML and lists the devices, once; [] where NVML is unavailable."""
        with self._lock:  # scrapes may run concurrently
            if self._devices is None:
                self._devices = []
                self._list_devices(self._devices)
            return self._devices

    def _list_devices(self, devices: list[tuple[str, Any]]) -> None:
        try:
            nvml = self._nvml = self._nvml or _import_pynvml()
        except ImportError:
            return  # nvidia-ml-py not installed
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except (nvml.NVMLError, OSError):
            return  # no library, no driver or no GPU
        for index in range(count):
            try:  # a device NVML cannot open (lost, no permission) is left out
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name, uuid = nvml.nvmlDeviceGetName(handle), nvml.nvmlDeviceGetUUID(handle)
            except nvml.NVMLError:
                continue
            self._info.append((str(index), name, uuid))
            devices.append((str(index), handle))

    def collect(self) -> Iterator[Metric]:
        devices = self._open()
        if not devices:
            return
        info = InfoMetricFamily("fwbench_gpu", "Identity of a GPU NVML sees", labels=["gpu"])
        for index, name, uuid in self._info:
            info.add_metric([index], {"name": name, "uuid": uuid})
        yield info
        for metric, text, reading in GAUGES:
            gauge = GaugeMetricFamily(metric, text, labels=["gpu"])
            yield from self._family(gauge, reading, devices)
        energy = CounterMetricFamily(
            "fwbench_gpu_energy_joules",
            "Energy the GPU used since the driver was loaded (Volta and later)",
            labels=["gpu"],
        )
        yield from self._family(energy, _energy_joules, devices)

    def _family(
        self,
        family: GaugeMetricFamily | CounterMetricFamily,
        reading: Reading,
        devices: list[tuple[str, Any]],
    ) -> Iterator[Metric]:
        """The family with one sample per device that gives the reading; nothing if none does."""
        nvml = self._nvml
        assert nvml is not None  # set by _open
        for index, handle in devices:
            try:
                family.add_metric([index], reading(nvml, handle))
            except nvml.NVMLError:
                continue  # NotSupported, or refused: this series only
        if family.samples:
            yield family
