from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_TRAIN: _ClassVar[Phase]
    PHASE_INFER: _ClassVar[Phase]

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[DType]
    DTYPE_FLOAT32: _ClassVar[DType]
    DTYPE_FLOAT16: _ClassVar[DType]
    DTYPE_BFLOAT16: _ClassVar[DType]
    DTYPE_FLOAT64: _ClassVar[DType]

class DeviceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEVICE_KIND_UNSPECIFIED: _ClassVar[DeviceKind]
    DEVICE_KIND_CPU: _ClassVar[DeviceKind]
    DEVICE_KIND_GPU: _ClassVar[DeviceKind]

class Stage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STAGE_UNSPECIFIED: _ClassVar[Stage]
    STAGE_BUILD: _ClassVar[Stage]
    STAGE_FIRST_ITERATION: _ClassVar[Stage]
    STAGE_WARMUP: _ClassVar[Stage]
    STAGE_MEASURE: _ClassVar[Stage]
    STAGE_PROFILE: _ClassVar[Stage]
PHASE_UNSPECIFIED: Phase
PHASE_TRAIN: Phase
PHASE_INFER: Phase
DTYPE_UNSPECIFIED: DType
DTYPE_FLOAT32: DType
DTYPE_FLOAT16: DType
DTYPE_BFLOAT16: DType
DTYPE_FLOAT64: DType
DEVICE_KIND_UNSPECIFIED: DeviceKind
DEVICE_KIND_CPU: DeviceKind
DEVICE_KIND_GPU: DeviceKind
STAGE_UNSPECIFIED: Stage
STAGE_BUILD: Stage
STAGE_FIRST_ITERATION: Stage
STAGE_WARMUP: Stage
STAGE_MEASURE: Stage
STAGE_PROFILE: Stage

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("spec_version", "identity", "libraries", "environment", "devices", "host", "threads", "workloads", "metrics_port", "pid", "world", "unsupported_reasons", "model_formats", "export_formats", "model_files", "max_upload_bytes", "profiler", "no_profiler")
    class LibrariesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class EnvironmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class UnsupportedReasonsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SPEC_VERSION_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    LIBRARIES_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    METRICS_PORT_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    WORLD_FIELD_NUMBER: _ClassVar[int]
    UNSUPPORTED_REASONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FORMATS_FIELD_NUMBER: _ClassVar[int]
    EXPORT_FORMATS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FILES_FIELD_NUMBER: _ClassVar[int]
    MAX_UPLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROFILER_FIELD_NUMBER: _ClassVar[int]
    NO_PROFILER_FIELD_NUMBER: _ClassVar[int]
    spec_version: str
    identity: AgentIdentity
    libraries: _containers.ScalarMap[str, str]
    environment: _containers.ScalarMap[str, str]
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    host: HostInfo
    threads: ThreadSettings
    workloads: _containers.RepeatedCompositeFieldContainer[WorkloadSupport]
    metrics_port: int
    pid: int
    world: WorldInfo
    unsupported_reasons: _containers.ScalarMap[str, str]
    model_formats: _containers.RepeatedScalarFieldContainer[str]
    export_formats: _containers.RepeatedScalarFieldContainer[str]
    model_files: WorkloadSupport
    max_upload_bytes: int
    profiler: str
    no_profiler: str
    def __init__(self, spec_version: _Optional[str] = ..., identity: _Optional[_Union[AgentIdentity, _Mapping]] = ..., libraries: _Optional[_Mapping[str, str]] = ..., environment: _Optional[_Mapping[str, str]] = ..., devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ..., host: _Optional[_Union[HostInfo, _Mapping]] = ..., threads: _Optional[_Union[ThreadSettings, _Mapping]] = ..., workloads: _Optional[_Iterable[_Union[WorkloadSupport, _Mapping]]] = ..., metrics_port: _Optional[int] = ..., pid: _Optional[int] = ..., world: _Optional[_Union[WorldInfo, _Mapping]] = ..., unsupported_reasons: _Optional[_Mapping[str, str]] = ..., model_formats: _Optional[_Iterable[str]] = ..., export_formats: _Optional[_Iterable[str]] = ..., model_files: _Optional[_Union[WorkloadSupport, _Mapping]] = ..., max_upload_bytes: _Optional[int] = ..., profiler: _Optional[str] = ..., no_profiler: _Optional[str] = ...) -> None: ...

class WorldInfo(_message.Message):
    __slots__ = ("world_size", "rank", "local_rank", "rendezvous", "backend", "local_devices")
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    RENDEZVOUS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    LOCAL_DEVICES_FIELD_NUMBER: _ClassVar[int]
    world_size: int
    rank: int
    local_rank: int
    rendezvous: str
    backend: str
    local_devices: int
    def __init__(self, world_size: _Optional[int] = ..., rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., rendezvous: _Optional[str] = ..., backend: _Optional[str] = ..., local_devices: _Optional[int] = ...) -> None: ...

class AgentIdentity(_message.Message):
    __slots__ = ("name", "framework", "framework_version", "variant", "plugin_version", "runtime_version", "python_version", "family", "family_version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    PYTHON_VERSION_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    FAMILY_VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    framework: str
    framework_version: str
    variant: str
    plugin_version: str
    runtime_version: str
    python_version: str
    family: str
    family_version: str
    def __init__(self, name: _Optional[str] = ..., framework: _Optional[str] = ..., framework_version: _Optional[str] = ..., variant: _Optional[str] = ..., plugin_version: _Optional[str] = ..., runtime_version: _Optional[str] = ..., python_version: _Optional[str] = ..., family: _Optional[str] = ..., family_version: _Optional[str] = ...) -> None: ...

class Device(_message.Message):
    __slots__ = ("kind", "index", "name", "memory_total_bytes")
    KIND_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    kind: DeviceKind
    index: int
    name: str
    memory_total_bytes: int
    def __init__(self, kind: _Optional[_Union[DeviceKind, str]] = ..., index: _Optional[int] = ..., name: _Optional[str] = ..., memory_total_bytes: _Optional[int] = ...) -> None: ...

class HostInfo(_message.Message):
    __slots__ = ("hostname", "cpu_model", "logical_cores", "physical_cores", "usable_cores", "memory_total_bytes", "os", "cpu_governor", "in_container")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    CPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_CORES_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_CORES_FIELD_NUMBER: _ClassVar[int]
    USABLE_CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    OS_FIELD_NUMBER: _ClassVar[int]
    CPU_GOVERNOR_FIELD_NUMBER: _ClassVar[int]
    IN_CONTAINER_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    cpu_model: str
    logical_cores: int
    physical_cores: int
    usable_cores: int
    memory_total_bytes: int
    os: str
    cpu_governor: str
    in_container: bool
    def __init__(self, hostname: _Optional[str] = ..., cpu_model: _Optional[str] = ..., logical_cores: _Optional[int] = ..., physical_cores: _Optional[int] = ..., usable_cores: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., os: _Optional[str] = ..., cpu_governor: _Optional[str] = ..., in_container: bool = ...) -> None: ...

class ThreadSettings(_message.Message):
    __slots__ = ("intra_op_threads", "inter_op_threads", "fixed_at_startup")
    INTRA_OP_THREADS_FIELD_NUMBER: _ClassVar[int]
    INTER_OP_THREADS_FIELD_NUMBER: _ClassVar[int]
    FIXED_AT_STARTUP_FIELD_NUMBER: _ClassVar[int]
    intra_op_threads: int
    inter_op_threads: int
    fixed_at_startup: bool
    def __init__(self, intra_op_threads: _Optional[int] = ..., inter_op_threads: _Optional[int] = ..., fixed_at_startup: bool = ...) -> None: ...

class WorkloadSupport(_message.Message):
    __slots__ = ("name", "phases", "dtypes", "modes", "max_batch_size", "params", "strategies")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    DTYPES_FIELD_NUMBER: _ClassVar[int]
    MODES_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    STRATEGIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    phases: _containers.RepeatedScalarFieldContainer[Phase]
    dtypes: _containers.RepeatedScalarFieldContainer[DType]
    modes: _containers.RepeatedScalarFieldContainer[str]
    max_batch_size: int
    params: _containers.RepeatedCompositeFieldContainer[ParamLimit]
    strategies: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., phases: _Optional[_Iterable[_Union[Phase, str]]] = ..., dtypes: _Optional[_Iterable[_Union[DType, str]]] = ..., modes: _Optional[_Iterable[str]] = ..., max_batch_size: _Optional[int] = ..., params: _Optional[_Iterable[_Union[ParamLimit, _Mapping]]] = ..., strategies: _Optional[_Iterable[str]] = ...) -> None: ...

class ParamLimit(_message.Message):
    __slots__ = ("name", "default_value", "min_value", "max_value", "multiple_of")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_VALUE_FIELD_NUMBER: _ClassVar[int]
    MIN_VALUE_FIELD_NUMBER: _ClassVar[int]
    MAX_VALUE_FIELD_NUMBER: _ClassVar[int]
    MULTIPLE_OF_FIELD_NUMBER: _ClassVar[int]
    name: str
    default_value: int
    min_value: int
    max_value: int
    multiple_of: int
    def __init__(self, name: _Optional[str] = ..., default_value: _Optional[int] = ..., min_value: _Optional[int] = ..., max_value: _Optional[int] = ..., multiple_of: _Optional[int] = ...) -> None: ...

class RunRequest(_message.Message):
    __slots__ = ("run_id", "workload", "phase", "batch_size", "dtype", "params", "threads", "warmup_iterations", "min_iterations", "min_seconds", "max_iterations", "seed", "mode", "strategy", "model", "count_flops", "profile")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    MIN_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    MIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    COUNT_FLOPS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    workload: str
    phase: Phase
    batch_size: int
    dtype: DType
    params: _containers.ScalarMap[str, int]
    threads: int
    warmup_iterations: int
    min_iterations: int
    min_seconds: float
    max_iterations: int
    seed: int
    mode: str
    strategy: str
    model: ModelFile
    count_flops: bool
    profile: ProfileRequest
    def __init__(self, run_id: _Optional[str] = ..., workload: _Optional[str] = ..., phase: _Optional[_Union[Phase, str]] = ..., batch_size: _Optional[int] = ..., dtype: _Optional[_Union[DType, str]] = ..., params: _Optional[_Mapping[str, int]] = ..., threads: _Optional[int] = ..., warmup_iterations: _Optional[int] = ..., min_iterations: _Optional[int] = ..., min_seconds: _Optional[float] = ..., max_iterations: _Optional[int] = ..., seed: _Optional[int] = ..., mode: _Optional[str] = ..., strategy: _Optional[str] = ..., model: _Optional[_Union[ModelFile, _Mapping]] = ..., count_flops: bool = ..., profile: _Optional[_Union[ProfileRequest, _Mapping]] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("progress", "result")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    progress: Progress
    result: RunResult
    def __init__(self, progress: _Optional[_Union[Progress, _Mapping]] = ..., result: _Optional[_Union[RunResult, _Mapping]] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("run_id", "stage", "iterations_done", "elapsed_seconds")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    stage: Stage
    iterations_done: int
    elapsed_seconds: float
    def __init__(self, run_id: _Optional[str] = ..., stage: _Optional[_Union[Stage, str]] = ..., iterations_done: _Optional[int] = ..., elapsed_seconds: _Optional[float] = ...) -> None: ...

class RunResult(_message.Message):
    __slots__ = ("run_id", "sample_nanoseconds", "first_iteration_nanoseconds", "build_nanoseconds", "warmup_iterations", "settings", "measure_started_unix_nanoseconds", "measure_ended_unix_nanoseconds", "items_per_sample", "accuracy", "rank", "generation", "outputs", "flops", "profile")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_ITERATION_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    BUILD_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    MEASURE_STARTED_UNIX_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    MEASURE_ENDED_UNIX_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_PER_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    FLOPS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    sample_nanoseconds: _containers.RepeatedScalarFieldContainer[int]
    first_iteration_nanoseconds: int
    build_nanoseconds: int
    warmup_iterations: int
    settings: EffectiveSettings
    measure_started_unix_nanoseconds: int
    measure_ended_unix_nanoseconds: int
    items_per_sample: int
    accuracy: AccuracyResult
    rank: RankResult
    generation: GenerationResult
    outputs: _containers.RepeatedCompositeFieldContainer[Tensor]
    flops: FlopCount
    profile: ProfileResult
    def __init__(self, run_id: _Optional[str] = ..., sample_nanoseconds: _Optional[_Iterable[int]] = ..., first_iteration_nanoseconds: _Optional[int] = ..., build_nanoseconds: _Optional[int] = ..., warmup_iterations: _Optional[int] = ..., settings: _Optional[_Union[EffectiveSettings, _Mapping]] = ..., measure_started_unix_nanoseconds: _Optional[int] = ..., measure_ended_unix_nanoseconds: _Optional[int] = ..., items_per_sample: _Optional[int] = ..., accuracy: _Optional[_Union[AccuracyResult, _Mapping]] = ..., rank: _Optional[_Union[RankResult, _Mapping]] = ..., generation: _Optional[_Union[GenerationResult, _Mapping]] = ..., outputs: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., flops: _Optional[_Union[FlopCount, _Mapping]] = ..., profile: _Optional[_Union[ProfileResult, _Mapping]] = ...) -> None: ...

class ProfileRequest(_message.Message):
    __slots__ = ("steps", "trace_dir")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TRACE_DIR_FIELD_NUMBER: _ClassVar[int]
    steps: int
    trace_dir: str
    def __init__(self, steps: _Optional[int] = ..., trace_dir: _Optional[str] = ...) -> None: ...

class ProfileResult(_message.Message):
    __slots__ = ("profiler", "steps", "step_nanoseconds", "operations", "trace_file", "trace_format", "not_profiled")
    PROFILER_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    STEP_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    TRACE_FILE_FIELD_NUMBER: _ClassVar[int]
    TRACE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    NOT_PROFILED_FIELD_NUMBER: _ClassVar[int]
    profiler: str
    steps: int
    step_nanoseconds: int
    operations: _containers.RepeatedCompositeFieldContainer[OperationTime]
    trace_file: str
    trace_format: str
    not_profiled: str
    def __init__(self, profiler: _Optional[str] = ..., steps: _Optional[int] = ..., step_nanoseconds: _Optional[int] = ..., operations: _Optional[_Iterable[_Union[OperationTime, _Mapping]]] = ..., trace_file: _Optional[str] = ..., trace_format: _Optional[str] = ..., not_profiled: _Optional[str] = ...) -> None: ...

class OperationTime(_message.Message):
    __slots__ = ("name", "op_class", "self_nanoseconds", "calls")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OP_CLASS_FIELD_NUMBER: _ClassVar[int]
    SELF_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    name: str
    op_class: str
    self_nanoseconds: int
    calls: float
    def __init__(self, name: _Optional[str] = ..., op_class: _Optional[str] = ..., self_nanoseconds: _Optional[int] = ..., calls: _Optional[float] = ...) -> None: ...

class FlopCount(_message.Message):
    __slots__ = ("forward_flops", "counter", "not_counted")
    FORWARD_FLOPS_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    NOT_COUNTED_FIELD_NUMBER: _ClassVar[int]
    forward_flops: float
    counter: str
    not_counted: str
    def __init__(self, forward_flops: _Optional[float] = ..., counter: _Optional[str] = ..., not_counted: _Optional[str] = ...) -> None: ...

class ModelFile(_message.Message):
    __slots__ = ("path", "format", "sha256", "inputs", "inputs_path", "inputs_sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    INPUTS_PATH_FIELD_NUMBER: _ClassVar[int]
    INPUTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    format: str
    sha256: str
    inputs: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    inputs_path: str
    inputs_sha256: str
    def __init__(self, path: _Optional[str] = ..., format: _Optional[str] = ..., sha256: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., inputs_path: _Optional[str] = ..., inputs_sha256: _Optional[str] = ...) -> None: ...

class ModelChunk(_message.Message):
    __slots__ = ("sha256", "total_bytes", "name", "folder", "path", "offset", "data")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FOLDER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    total_bytes: int
    name: str
    folder: bool
    path: str
    offset: int
    data: bytes
    def __init__(self, sha256: _Optional[str] = ..., total_bytes: _Optional[int] = ..., name: _Optional[str] = ..., folder: bool = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class UploadModelResponse(_message.Message):
    __slots__ = ("model", "held", "received_bytes")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    model: ModelFile
    held: bool
    received_bytes: int
    def __init__(self, model: _Optional[_Union[ModelFile, _Mapping]] = ..., held: bool = ..., received_bytes: _Optional[int] = ...) -> None: ...

class TensorSpec(_message.Message):
    __slots__ = ("name", "shape", "dtype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ...) -> None: ...

class InspectModelRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: ModelFile
    def __init__(self, model: _Optional[_Union[ModelFile, _Mapping]] = ...) -> None: ...

class ExportModelRequest(_message.Message):
    __slots__ = ("model", "format", "path")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    model: ModelFile
    format: str
    path: str
    def __init__(self, model: _Optional[_Union[ModelFile, _Mapping]] = ..., format: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ExportModelResponse(_message.Message):
    __slots__ = ("model", "tool")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    model: ModelFile
    tool: str
    def __init__(self, model: _Optional[_Union[ModelFile, _Mapping]] = ..., tool: _Optional[str] = ...) -> None: ...

class ModelSignature(_message.Message):
    __slots__ = ("inputs", "outputs", "parameters", "phases", "unsupported_reasons", "details")
    class UnsupportedReasonsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class DetailsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    UNSUPPORTED_REASONS_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    outputs: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    parameters: int
    phases: _containers.RepeatedScalarFieldContainer[Phase]
    unsupported_reasons: _containers.ScalarMap[str, str]
    details: _containers.ScalarMap[str, str]
    def __init__(self, inputs: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., parameters: _Optional[int] = ..., phases: _Optional[_Iterable[_Union[Phase, str]]] = ..., unsupported_reasons: _Optional[_Mapping[str, str]] = ..., details: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Tensor(_message.Message):
    __slots__ = ("name", "shape", "dtype", "data", "elements")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    data: bytes
    elements: int
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ..., data: _Optional[bytes] = ..., elements: _Optional[int] = ...) -> None: ...

class GenerationResult(_message.Message):
    __slots__ = ("prefill_nanoseconds", "decode_step_nanoseconds", "decode_steps_per_sample")
    PREFILL_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    DECODE_STEP_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    DECODE_STEPS_PER_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    prefill_nanoseconds: _containers.RepeatedScalarFieldContainer[int]
    decode_step_nanoseconds: _containers.RepeatedScalarFieldContainer[int]
    decode_steps_per_sample: int
    def __init__(self, prefill_nanoseconds: _Optional[_Iterable[int]] = ..., decode_step_nanoseconds: _Optional[_Iterable[int]] = ..., decode_steps_per_sample: _Optional[int] = ...) -> None: ...

class RankResult(_message.Message):
    __slots__ = ("rank", "world_size", "strategy", "backend", "engine_nanoseconds", "collective_bytes", "first_step_loss")
    class EngineNanosecondsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    ENGINE_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_LOSS_FIELD_NUMBER: _ClassVar[int]
    rank: int
    world_size: int
    strategy: str
    backend: str
    engine_nanoseconds: _containers.ScalarMap[str, int]
    collective_bytes: int
    first_step_loss: float
    def __init__(self, rank: _Optional[int] = ..., world_size: _Optional[int] = ..., strategy: _Optional[str] = ..., backend: _Optional[str] = ..., engine_nanoseconds: _Optional[_Mapping[str, int]] = ..., collective_bytes: _Optional[int] = ..., first_step_loss: _Optional[float] = ...) -> None: ...

class AccuracyResult(_message.Message):
    __slots__ = ("target_accuracy", "reached", "time_to_target_nanoseconds", "epochs_to_target", "epochs", "final_accuracy", "train_examples", "validation_examples", "dataset", "learning_rate", "momentum", "history")
    TARGET_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    REACHED_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_TARGET_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_TO_TARGET_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    FINAL_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    TRAIN_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    MOMENTUM_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    target_accuracy: float
    reached: bool
    time_to_target_nanoseconds: int
    epochs_to_target: int
    epochs: int
    final_accuracy: float
    train_examples: int
    validation_examples: int
    dataset: str
    learning_rate: float
    momentum: float
    history: _containers.RepeatedCompositeFieldContainer[EpochRecord]
    def __init__(self, target_accuracy: _Optional[float] = ..., reached: bool = ..., time_to_target_nanoseconds: _Optional[int] = ..., epochs_to_target: _Optional[int] = ..., epochs: _Optional[int] = ..., final_accuracy: _Optional[float] = ..., train_examples: _Optional[int] = ..., validation_examples: _Optional[int] = ..., dataset: _Optional[str] = ..., learning_rate: _Optional[float] = ..., momentum: _Optional[float] = ..., history: _Optional[_Iterable[_Union[EpochRecord, _Mapping]]] = ...) -> None: ...

class EpochRecord(_message.Message):
    __slots__ = ("epoch", "train_nanoseconds", "eval_nanoseconds", "validation_accuracy")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRAIN_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    EVAL_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    train_nanoseconds: int
    eval_nanoseconds: int
    validation_accuracy: float
    def __init__(self, epoch: _Optional[int] = ..., train_nanoseconds: _Optional[int] = ..., eval_nanoseconds: _Optional[int] = ..., validation_accuracy: _Optional[float] = ...) -> None: ...

class EffectiveSettings(_message.Message):
    __slots__ = ("dtype", "intra_op_threads", "inter_op_threads", "mode", "layout", "device", "params", "extra")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ExtraEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    INTRA_OP_THREADS_FIELD_NUMBER: _ClassVar[int]
    INTER_OP_THREADS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    dtype: DType
    intra_op_threads: int
    inter_op_threads: int
    mode: str
    layout: str
    device: str
    params: _containers.ScalarMap[str, int]
    extra: _containers.ScalarMap[str, str]
    def __init__(self, dtype: _Optional[_Union[DType, str]] = ..., intra_op_threads: _Optional[int] = ..., inter_op_threads: _Optional[int] = ..., mode: _Optional[str] = ..., layout: _Optional[str] = ..., device: _Optional[str] = ..., params: _Optional[_Mapping[str, int]] = ..., extra: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("cancelled", "run_id")
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    run_id: str
    def __init__(self, cancelled: bool = ..., run_id: _Optional[str] = ...) -> None: ...
