"""One command on a GPU host: measure torch-cu12 and jax-cuda12 there and write docs/gpu.md.

From a checkout, with the host's own Python (the one that has PyTorch and JAX with CUDA):
    python3 tests/benchmarks/gpu_host.py
It installs nothing. It
  1. checks that this interpreter can import what the collector needs, and if not prints the
     wheels to carry and how (then stops);
  2. runs `collector doctor --python` (the agents' own requirements, the driver, NVML);
  3. runs the collector with the existing-environment launcher (--python AGENT=PY) on gemm
     (float32 with TF32 off, float32 with TF32 on = "tf32", bfloat16), conv2d and resnet50
     (train and infer, several batch sizes, float32 and bfloat16), and the transformers in
     bfloat16 in every mode each agent offers (torch eager and compiled, JAX jit; the attention
     op fused and plain; bert and gpt training and inference; generate's time to first token
     and tokens per second at several batch sizes and prompts), with telemetry; with
     --deadline SECONDS the sweep still running then is interrupted (what it measured is
     kept) and later ones are skipped, so a leased GPU's time bounds the whole script;
  4. times the same gemm with a bare script (bare_torch.py) for the harness's overhead, its
     bf16 figure also being the device's measured bf16 GEMM peak;
  5. writes the document (gpu_doc.py) from the results.
Everything lands in --out (default fwbench-results/gpu-host-UTCSTAMP); --doc names the page.

--cpu-dry-run runs the same code path on the CPU with tiny shapes (agents torch-cpu unless
--agents says otherwise), to prove the pipeline where there is no GPU; its page says it is a
dry run and is not GPU results. docs/gpu.md explains the method.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SOURCES = [ROOT / "collector", ROOT / "proto", ROOT / "agents" / "runtime"]
sys.path[:0] = [str(HERE)]  # gpu_doc beside this file

import gpu_doc  # noqa: E402

# What the collector imports (module -> distribution to carry when it is missing).
COLLECTOR_NEEDS = {
    "typer": "typer",
    "rich": "rich",
    "pandas": "pandas",
    "pyarrow": "pyarrow",
    "tabulate": "tabulate",
    "numpy": "numpy",
    "scipy": "scipy",
    "matplotlib": "matplotlib",
    "jinja2": "jinja2",
    "psutil": "psutil",
    "packaging": "packaging",
    "grpc": "grpcio",
    "grpc_health": "grpcio-health-checking",
    "grpc_reflection": "grpcio-reflection",
    "google.protobuf": "protobuf",
    "prometheus_client": "prometheus-client",
    "docker": "docker",
}
GPU_AGENTS = ("torch-cu12", "jax-cuda12")


@dataclass(frozen=True)
class Sweep:
    """One `collector run`: its workloads and the GPU switches its agents start with."""

    name: str
    workloads: str
    batch_sizes: str
    dtypes: str
    params: tuple[str, ...] = ()
    tf32: str = "off"
    cudnn_benchmark: str = "on"
    modes: str = "default"  # collector run --modes: default, all, or names


@dataclass
class Plan:
    device: str
    gemm: tuple[int, int, int]
    sweeps: list[Sweep]
    timing: list[str]  # collector run's loop options
    bare_iterations: int
    bare_warmup: int
    bare_min_seconds: float  # as the sweeps' --min-seconds: the same length of sustained work


# The transformers' shapes: on a GPU, BERT-base and GPT-2 small at 512 tokens, attention at
# GPT-3's head size over 2048 causal tokens, generation from prompts of 128 and 512 tokens;
# on the CPU dry run, tiny ones.
GPU_SHAPES = {
    "attention": ("heads=16", "seq_len=2048", "head_dim=128", "causal=1"),
    "bert,gpt": ("seq_len=512",),
    "generate": ("prompt_len=128,512", "new_tokens=128"),
}
_TINY = ("layers=2", "hidden=64", "heads=4", "vocab=500", "context=64")
DRY_SHAPES = {
    "attention": ("heads=2", "seq_len=16", "head_dim=8", "causal=1"),
    "bert,gpt": (*_TINY, "seq_len=16"),
    "generate": (*_TINY, "prompt_len=8,16", "new_tokens=8"),
}


def transformer_sweeps(
    batches: str,
    generate_batches: str,
    shapes: dict[str, tuple[str, ...]],
    dtypes: str = "bfloat16",
) -> list[Sweep]:
    """Every mode each agent offers (torch eager and compile, JAX jit; attention's plain)."""
    return [
        Sweep("attention", "attention", batches, dtypes, shapes["attention"], modes="all"),
        Sweep("transformers", "bert,gpt", batches, dtypes, shapes["bert,gpt"], modes="all"),
        Sweep("generate", "generate", generate_batches, dtypes, shapes["generate"], modes="all"),
    ]


def gpu_plan() -> Plan:
    size = (8192, 8192, 8192)
    gemm = tuple(f"{axis}={value}" for axis, value in zip("mnk", size, strict=True))
    return Plan(
        "cuda",
        size,
        [
            Sweep("gemm", "gemm", "1", "float32,bfloat16", gemm, tf32="off"),
            Sweep("gemm-tf32", "gemm", "1", "float32", gemm, tf32="on"),
            Sweep("conv2d", "conv2d", "32,128,256", "float32,bfloat16", tf32="off"),
            Sweep("resnet50", "resnet50", "32,256", "float32,bfloat16", tf32="off"),
            *transformer_sweeps("8,32", "1,8,32", GPU_SHAPES),
        ],
        ["--warmup", "10", "--min-seconds", "2"],
        bare_iterations=50,
        bare_warmup=10,
        bare_min_seconds=2.0,
    )


def dry_plan() -> Plan:
    size = (128, 128, 128)
    gemm = tuple(f"{axis}={value}" for axis, value in zip("mnk", size, strict=True))
    small = ("channels_in=8", "channels_out=8", "height=16", "width=16")
    return Plan(
        "cpu",
        size,
        [
            Sweep("gemm", "gemm", "1", "float32,bfloat16", gemm, tf32="off"),
            Sweep("gemm-tf32", "gemm", "1", "float32", gemm, tf32="on"),
            Sweep("conv2d", "conv2d", "2,4", "float32", small, tf32="off"),
            Sweep("lenet", "lenet", "2,4", "float32", tf32="off"),
            *transformer_sweeps("2", "1,2", DRY_SHAPES, dtypes="float32"),
        ],
        ["--warmup", "1", "--iterations", "3", "--min-seconds", "0.05"],
        bare_iterations=5,
        bare_warmup=1,
        bare_min_seconds=0.05,
    )


@dataclass
class Record:
    """What gpu_doc.py reads: OUT/gpu-host.json."""

    mode: str
    started: str
    command: str
    python: str
    agents: list[str]
    gemm: list[int]
    sweeps: list[dict[str, object]] = field(default_factory=list)
    bare: list[dict[str, object]] = field(default_factory=list)
    host: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def missing_collector_modules() -> list[str]:
    """Distributions this interpreter lacks for the collector (nothing imported for real)."""
    missing = []
    for module, distribution in COLLECTOR_NEEDS.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(distribution)
    return missing


# Released in step with grpcio: carried ones must match the grpcio already installed.
GRPC_COMPANIONS = ("grpcio-health-checking", "grpcio-reflection")


def pinned(missing: list[str]) -> list[str]:
    """`missing`, the grpcio companions pinned to the installed grpcio's version."""
    try:
        grpcio = importlib.metadata.version("grpcio")
    except importlib.metadata.PackageNotFoundError:
        return missing
    return [f"{name}=={grpcio}" if name in GRPC_COMPANIONS else name for name in missing]


def import_error(env: dict[str, str]) -> str:
    """The collector imported once, as each sweep will: "" when it imports, else the error's
    tail (a wheel that is there but does not fit, e.g. grpcio-health-checking generated for a
    newer protobuf than the host has, fails here rather than in every sweep)."""
    command = [sys.executable, "-c", "import fwbench.collector.cli"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    return "" if done.returncode == 0 else (done.stderr.strip() or done.stdout.strip())[-1500:]


def carry_instructions(missing: list[str]) -> str:
    return (
        f"{sys.executable} cannot import what the collector needs: {', '.join(missing)}.\n"
        + how_to_carry(pinned(missing))
    )


def how_to_carry(names: list[str]) -> str:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    tag = f"{sys.version_info.major}{sys.version_info.minor}"
    listed = " ".join(names)
    return (
        "On a machine with a package index, fetch the wheels for this host:\n"
        f"  python3 -m pip download --only-binary=:all: --python-version {version} "
        f"--implementation cp --abi cp{tag} --platform manylinux_2_28_x86_64 "
        f"--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d wheels {listed}\n"
        "carry the folder here, then either install them into this interpreter:\n"
        f"  {sys.executable} -m pip install --no-index --find-links wheels {listed}\n"
        "or keep this interpreter untouched:\n"
        f"  {sys.executable} -m pip install --no-index --no-deps --target /tmp/site wheels/*.whl"
        " && export PYTHONPATH=/tmp/site\n"
        "and run this script again."
    )


def source_environment(*more: Path) -> dict[str, str]:
    """The collector (and `more`) from this checkout's sources, installed or not."""
    paths = [str(p) for p in (*more, *SOURCES)] + [os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


# A sweep is not started with less than this left before --deadline (agents take ~10 s to start).
MIN_SWEEP_S = 20.0
# After SIGTERM at the deadline, how long the collector gets to store its interrupted run.
STOP_GRACE_S = 60.0


def collector(args: list[str], env: dict[str, str], log: Path, seconds: float | None = None) -> int:
    """Run the collector; past `seconds` it gets SIGTERM (it keeps what it measured and marks
    the run interrupted, as for Ctrl-C), then SIGKILL if it has not stopped STOP_GRACE_S later.
    Not SIGINT: a script started in the background (nohup, `&`) hands its children SIGINT
    ignored, and the collector then leaves it ignored, as a background job should."""
    command = [sys.executable, "-m", "fwbench.collector.cli", *args]
    print("$", " ".join(command), flush=True)
    with log.open("w") as sink:
        child = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            code = child.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGTERM)
            try:
                code = child.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
                code = child.wait()
    print(log.read_text()[-3000:], flush=True)
    return code


def host_facts(python: str) -> dict[str, str]:
    facts = {"python": sys.version.split()[0], "agent_python": python}
    if shutil.which("nvidia-smi"):
        query = "name,driver_version,memory.total,power.limit,clocks.max.sm"
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        facts["nvidia_smi"] = done.stdout.strip() or done.stderr.strip()
    lscpu = shutil.which("lscpu")
    if lscpu:
        for line in subprocess.run([lscpu], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                facts["cpu_model"] = line.split(":", 1)[1].strip()
    return facts


def run_bare(python: str, plan: Plan, out: Path) -> list[dict[str, object]]:
    """The gemm of the sweeps, each precision, timed by bare_torch.py in the agents' Python."""
    results: list[dict[str, object]] = []
    size = ",".join(str(n) for n in plan.gemm)
    for label, dtype, tf32 in (
        ("float32", "float32", "off"),
        ("tf32", "float32", "on"),
        ("bfloat16", "bfloat16", "off"),
    ):
        command = [python, str(HERE / "bare_torch.py"), "gemm", "1", str(plan.bare_warmup)]
        command += [str(plan.bare_iterations), "--device", plan.device, "--dtype", dtype]
        command += ["--tf32", tf32, "--size", size, "--min-seconds", str(plan.bare_min_seconds)]
        # The plugin's models and the runtime they import, from the checkout, as the agent has.
        env = source_environment(ROOT / "agents" / "torch")
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        entry: dict[str, object] = {"precision": label, "command": " ".join(command)}
        entry["min_seconds"] = plan.bare_min_seconds
        if done.returncode == 0:
            entry["samples_ns"] = json.loads(done.stdout.strip().splitlines()[-1])
        else:
            entry["error"] = (done.stderr.strip() or done.stdout.strip())[-600:]
        results.append(entry)
    (out / "bare.json").write_text(json.dumps(results, indent=1))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the agents' interpreter")
    parser.add_argument("--agents", default="", help="default torch-cu12,jax-cuda12")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "gpu.md")
    parser.add_argument("--manifests", type=Path, default=None)
    parser.add_argument("--cpu-dry-run", action="store_true")
    parser.add_argument(
        "--deadline",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wall-clock seconds for the sweeps (from the start): the sweep running then is "
        "interrupted (its measured cells kept), later ones are skipped; the bare script and "
        "the page still follow",
    )
    given = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(given)
    started = time.monotonic()
    missing = missing_collector_modules()
    if missing:
        print(carry_instructions(missing), file=sys.stderr)
        return 2
    broken = import_error(source_environment())
    if broken:
        print(
            f"the collector does not import in {sys.executable}:\n{broken}\n\nA carried "
            "wheel may need a newer version of a package this host has: the grpcio companions "
            "need the protobuf their code was generated for ('gencode X runtime Y': carry "
            "protobuf>=X too, e.g. protobuf==7.36.2 for 1.85.1).\n" + how_to_carry(["NAME"]),
            file=sys.stderr,
        )
        return 2
    plan = dry_plan() if args.cpu_dry_run else gpu_plan()
    default_agents = "torch-cpu" if args.cpu_dry_run else ",".join(GPU_AGENTS)
    agents = [a for a in (args.agents or default_agents).split(",") if a]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = (args.out or ROOT / "fwbench-results" / f"gpu-host-{stamp}").absolute()
    out.mkdir(parents=True, exist_ok=True)
    record = Record(
        mode="cpu-dry-run" if args.cpu_dry_run else "gpu",
        started=stamp,
        command=" ".join(["python3", "tests/benchmarks/gpu_host.py", *given]),
        python=args.python,
        agents=agents,
        gemm=list(plan.gemm),
        host=host_facts(args.python),
    )
    # The host's CPU ceilings (collector calibrate) are not used by GPU rows and would cost
    # leased time; the page's ceiling is the bare script's bf16 figure.
    env = {"FWBENCH_CALIBRATION": "off", **source_environment()}
    extra = ["--manifests", str(args.manifests)] if args.manifests else []
    pythons = [option for a in agents for option in ("--python", f"{a}={args.python}")]
    code = collector(["doctor", *pythons, *extra], env, out / "doctor.txt")
    if code != 0:
        record.notes.append(f"collector doctor exited {code} (see doctor.txt)")
    for sweep in plan.sweeps:
        left = None if args.deadline is None else args.deadline - (time.monotonic() - started)
        if left is not None and left < MIN_SWEEP_S:
            record.sweeps.append(
                {
                    **asdict(sweep),
                    "folder": "",
                    "exit_code": None,
                    "stopped": "skipped: the --deadline had passed",
                }
            )
            continue
        folder = out / f"run-{sweep.name}"
        options = ["run", "--agents", ",".join(agents), *pythons, *extra]
        options += ["--workloads", sweep.workloads, "--phases", "train,infer"]
        options += ["--batch-sizes", sweep.batch_sizes, "--dtypes", sweep.dtypes]
        options += ["--modes", sweep.modes]
        options += [f"--param={p}" for p in sweep.params] + plan.timing + ["--out", str(folder)]
        switches = {"FWBENCH_TF32": sweep.tf32, "FWBENCH_CUDNN_BENCHMARK": sweep.cudnn_benchmark}
        began = time.monotonic()
        code = collector(options, {**env, **switches}, out / f"run-{sweep.name}.log", left)
        entry = {**asdict(sweep), "folder": folder.name, "exit_code": code}
        if left is not None and time.monotonic() - began >= left:
            entry["stopped"] = "interrupted at the --deadline (the cells it measured are kept)"
        record.sweeps.append(entry)
    record.bare = run_bare(args.python, plan, out)  # failures are recorded, not raised
    record.notes += gpu_doc.tensorflow_note(args.python, args.cpu_dry_run)
    (out / "gpu-host.json").write_text(json.dumps(asdict(record), indent=1))
    args.doc.write_text(gpu_doc.render(out))
    print(f"wrote {args.doc} from {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
