"""The smoke checks: small functions in a table, each returning a detail string, raising Skip(reason) when
it cannot run here, or failing with an exception whose message names the problem.

Expected versions come from what the image claims (/etc/imgbuild/variant.json, written from its labels),
never from numbers written here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from smoke_tests import devel
from smoke_tests.archs import kernels_for
from smoke_tests.results import Skip


@dataclass(frozen=True)
class Context:
    expect: dict[str, Any]  # the image's claims: torch, torch_cuda, cudnn, nccl, python, archs, ptx
    gpus: int | None  # GPUs the container was given; None: unknown (outside Docker)
    require_gpu: bool = False
    devices: list[str] = field(default_factory=lambda: ["cpu"])


Check = Callable[[Context], str]
CHECKS: list[tuple[str, Check]] = []


def check(name: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        CHECKS.append((name, fn))
        return fn
    return register


def need_gpu(ctx: Context) -> None:
    if not torch.cuda.is_available():
        if ctx.require_gpu or (ctx.gpus or 0) > 0:
            raise AssertionError(f"CUDA is not available but {ctx.gpus or 'a'} GPU(s) were required")
        raise Skip("CPU-only: torch.cuda.is_available() is False, no GPU was given to this container")


def close(a: torch.Tensor, b: torch.Tensor, what: str, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    if not torch.allclose(a.float().cpu(), b.float().cpu(), rtol=rtol, atol=atol):
        diff = (a.float().cpu() - b.float().cpu()).abs().max().item()
        raise AssertionError(f"{what}: max difference {diff:.3g} over tolerance")


# ---- versions the image really loads, against what it claims ----------------------------------------


def cudnn_number(version: str) -> int:
    """'9.5.1.17' -> 90501, the form torch.backends.cudnn.version() returns."""
    major, minor, patch = (int(x) for x in version.split(".")[:3])
    return major * 10000 + minor * 100 + patch


@check("versions.torch")
def _torch_version(ctx: Context) -> str:
    want = ctx.expect.get("torch")
    if not want:
        raise Skip("no expected version (not an imgbuild image)")
    got = torch.__version__.split("+")[0]
    assert got == want, f"torch {torch.__version__} is loaded, the image claims {want}"
    return str(torch.__version__)


@check("versions.torch_cuda")
def _torch_cuda(ctx: Context) -> str:
    want = ctx.expect.get("torch_cuda")
    if not want:
        raise Skip("no expected version (not an imgbuild image)")
    assert torch.version.cuda == want, f"torch.version.cuda is {torch.version.cuda}, the image claims {want}"
    return str(torch.version.cuda)


@check("versions.cudnn")
def _cudnn(ctx: Context) -> str:
    want = ctx.expect.get("cudnn")
    if not want:
        raise Skip("no expected version (not an imgbuild image)")
    got = torch.backends.cudnn.version()
    assert got == cudnn_number(want), f"cuDNN {got} is loaded, the image claims {want} ({cudnn_number(want)})"
    return str(got)


@check("versions.nccl")
def _nccl(ctx: Context) -> str:
    want = ctx.expect.get("nccl")
    if not want:
        raise Skip("no expected version (not an imgbuild image)")
    got = ".".join(str(x) for x in torch.cuda.nccl.version())
    assert got == want, f"NCCL {got} is loaded, the image claims {want}"
    return got


@check("versions.python")
def _python(ctx: Context) -> str:
    want = ctx.expect.get("python")
    if not want:
        raise Skip("no expected version (not an imgbuild image)")
    got = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert got == want, f"Python {got} runs, the image claims {want}"
    return sys.version.split()[0]


# ---- CUDA ----------------------------------------------------------------------------------------------


@check("cuda.available")
def _available(ctx: Context) -> str:
    need_gpu(ctx)
    return f"{torch.cuda.device_count()} device(s)"


@check("cuda.device_count")
def _count(ctx: Context) -> str:
    need_gpu(ctx)
    if ctx.gpus is None:
        raise Skip("the number of GPUs given is unknown outside imgbuild's runner")
    assert torch.cuda.device_count() == ctx.gpus, f"{torch.cuda.device_count()} visible, {ctx.gpus} given"
    return str(ctx.gpus)


@check("cuda.kernels")
def _kernels(ctx: Context) -> str:
    need_gpu(ctx)
    archs = ctx.expect.get("archs") or torch.cuda.get_arch_list()
    found = []
    for i in range(torch.cuda.device_count()):
        cap = torch.cuda.get_device_capability(i)
        kernels = kernels_for(cap, archs, bool(ctx.expect.get("ptx")))
        name = torch.cuda.get_device_name(i)
        assert kernels, f"GPU {i} ({name}, sm_{cap[0]}{cap[1]}) has no kernels in this wheel ({', '.join(archs)})"
        found.append(f"{name} sm_{cap[0]}{cap[1]} -> {kernels}")
    return "; ".join(found)


def within(got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor, what: str) -> None:
    """Every element of `got` within its own error bound of the float64 reference `want`."""
    excess = (got.double().cpu() - want).abs() - bound
    if (excess > 0).any():
        worst = int(excess.argmax())
        raise AssertionError(f"{what}: {int((excess > 0).sum())} of {excess.numel()} outputs past their error "
                             f"bound (worst: {float(got.flatten()[worst]):.6g} vs {float(want.flatten()[worst]):.6g}, "
                             f"bound {float(bound.flatten()[worst]):.3g})")


def round_mantissa(t: torch.Tensor, bits: int) -> torch.Tensor:
    """float32 values rounded to `bits` explicit mantissa bits (TF32: 10), as a TF32 kernel reads its
    inputs (round to nearest; ties are rare enough in random data not to matter to a bound)."""
    drop = 23 - bits
    raw = t.float().contiguous().view(torch.int32)
    rounded = (raw + (1 << (drop - 1))) & ~((1 << drop) - 1)
    return rounded.view(torch.float32)


# Error bounds, per output, for a sum of products computed in float32 from inputs that may have been rounded
# to TF32, against the float64 reference of the unrounded inputs, as a multiple of the sum of the products'
# magnitudes. TF32 keeps 10 mantissa bits: each input within 2**-11 relative, a product within 2**-10; the
# bound is 2**-8, room for float32 accumulation and for a Winograd or FFT algorithm's transforms. Float32
# without TF32: 2**-14 (n terms accumulate at most n * 2**-24: 2**-15 for the 512-term matmul). cuDNN and
# cuBLAS pick TF32 kernels on Ampere and later when allowed (torch.backends.cudnn.allow_tf32 is True by
# default), so a fixed 1e-3 tolerance fails good GPUs: simulated on the CPU with the conv check's inputs,
# 2,013 of 32,768 outputs were past 1e-3. A broken kernel is off by the outputs' own size, far past both.
TF32_BOUND = 2.0 ** -8
FP32_BOUND = 2.0 ** -14


def conv_bounds(x: torch.Tensor, w: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 reference of conv2d(x, w, padding=1) and each output's error bound at `scale`."""
    want = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    size = torch.nn.functional.conv2d(x.double().abs(), w.double().abs(), padding=1)
    return want, size * scale + 1e-30


@check("cuda.matmul")
def _matmul(ctx: Context) -> str:
    need_gpu(ctx)
    torch.manual_seed(0)
    a, b = torch.randn(512, 512, dtype=torch.float64), torch.randn(512, 512, dtype=torch.float64)
    expected = a @ b
    size = a.abs() @ b.abs()
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        for i in range(torch.cuda.device_count()):
            dev = torch.device("cuda", i)
            close(a.to(dev) @ b.to(dev), expected, f"float64 matmul on cuda:{i}", rtol=1e-9, atol=1e-9)
            torch.backends.cuda.matmul.allow_tf32 = False  # float32 as float32 (PyTorch's default)
            within(a.float().to(dev) @ b.float().to(dev), expected, size * FP32_BOUND,
                   f"float32 matmul on cuda:{i}")
            torch.backends.cuda.matmul.allow_tf32 = True  # what set_float32_matmul_precision("high") gives
            within(a.float().to(dev) @ b.float().to(dev), expected, size * TF32_BOUND,
                   f"TF32 matmul on cuda:{i}")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return f"float64, float32 and TF32 within their error bounds on {torch.cuda.device_count()} device(s)"


@check("cuda.cudnn_conv")
def _conv(ctx: Context) -> str:
    need_gpu(ctx)
    torch.manual_seed(0)
    x, w = torch.randn(4, 3, 32, 32), torch.randn(8, 3, 3, 3)
    for tf32, scale in ((False, FP32_BOUND), (True, TF32_BOUND)):
        want, bound = conv_bounds(x, w, scale)
        with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True, allow_tf32=tf32):
            got = torch.nn.functional.conv2d(x.cuda(), w.cuda(), padding=1)
        within(got, want, bound, f"cuDNN conv2d ({'TF32 allowed' if tf32 else 'float32'})")
    return f"cuDNN {torch.backends.cudnn.version()}: float32 and TF32 within their error bounds"


@check("cuda.torchvision_nms")
def _nms(ctx: Context) -> str:
    need_gpu(ctx)
    import torchvision

    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7])
    keep = torchvision.ops.nms(boxes.cuda(), scores.cuda(), 0.5).cpu().tolist()
    assert keep == [0, 2], f"nms kept {keep}, expected [0, 2]"
    return f"torchvision {torchvision.__version__}"


@check("cuda.bf16_matmul")
def _bf16(ctx: Context) -> str:
    need_gpu(ctx)
    torch.manual_seed(0)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    # The reference takes the inputs as bf16 holds them; what is left is the output's rounding to bf16 (2**-8
    # relative) and float32 accumulation. Reduced-precision reductions (bf16 partial sums in split-K, allowed
    # by default) could add 2**-8 of the products' magnitude: turned off here, so the bound stays tight.
    a16, b16 = a.bfloat16(), b.bfloat16()
    want = a16.double() @ b16.double()
    bound = want.abs() * 2.0 ** -8 + (a16.double().abs() @ b16.double().abs()) * 2.0 ** -16
    previous = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    try:
        got = a16.cuda() @ b16.cuda()
    finally:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = previous
    assert got.dtype == torch.bfloat16, f"bf16 matmul gave {got.dtype}"
    within(got, want, bound, "bf16 matmul")
    return "within bf16's error bound"


@check("cuda.compile")
def _compile_cuda(ctx: Context) -> str:
    need_gpu(ctx)
    fn = torch.compile(lambda x: torch.sin(x) ** 2 + torch.cos(x) ** 2)
    out = fn(torch.randn(1024, device="cuda"))
    close(out, torch.ones(1024), "torch.compile on cuda")
    return "Triton kernel compiled and ran"


@check("cuda.mixed_devices_raise")
def _mixed(ctx: Context) -> str:
    need_gpu(ctx)
    try:
        _ = torch.ones(2) + torch.ones(2, device="cuda")
    except RuntimeError:
        return "RuntimeError, as expected"
    raise AssertionError("adding a cpu and a cuda tensor did not raise")


@check("cuda.autocast")
def _autocast(ctx: Context) -> str:
    need_gpu(ctx)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = torch.nn.Linear(16, 16).cuda()(torch.randn(4, 16, device="cuda"))
    assert out.dtype == torch.bfloat16, f"autocast gave {out.dtype}"
    return "bf16 under autocast"


# ---- tensor and autograd correctness, on every device ----------------------------------------------


def on_devices(ctx: Context) -> list[str]:
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


@check("tensor.grad_of_square")
def _grad(ctx: Context) -> str:
    for dev in on_devices(ctx):
        x = torch.tensor([1.0, -2.0, 3.0], device=dev, requires_grad=True)
        (x ** 2 + 2).sum().backward()
        assert x.grad is not None
        close(x.grad, 2 * x.detach(), f"d/dx sum(x^2+2) on {dev}")
    return "grad == 2x on " + ", ".join(on_devices(ctx))


@check("tensor.views_share_storage")
def _views(ctx: Context) -> str:
    for dev in on_devices(ctx):
        base = torch.arange(6.0, device=dev).reshape(2, 3)
        view, t, copy = base.view(3, 2), base.transpose(0, 1), base.clone()
        base[0, 0] = 42.0
        assert view[0, 0].item() == 42.0 and t[0, 0].item() == 42.0, f"a view did not share storage on {dev}"
        assert copy[0, 0].item() == 0.0, f"clone shared storage on {dev}"
    return "view/transpose share, clone copies"


@check("tensor.broadcasting")
def _broadcast(ctx: Context) -> str:
    for dev in on_devices(ctx):
        out = torch.tensor([[1.0], [2.0], [3.0]], device=dev) + torch.arange(5.0, device=dev).expand(3, 5)
        assert out.shape == (3, 5), f"shape {tuple(out.shape)} on {dev}"
        assert out[2, 4].item() == 7.0 and out[0, 0].item() == 1.0, f"values wrong on {dev}"
    return "[3,1] + [3,5] -> [3,5]"


@check("tensor.non_leaf_grad_is_none")
def _non_leaf(ctx: Context) -> str:
    import warnings

    x = torch.ones(3, requires_grad=True)
    y = x * 2
    y.sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns when .grad of a non-leaf is read: that is the point
        assert y.grad is None, "a non-leaf tensor kept .grad"
    return "None, as documented"


@check("tensor.inplace_on_saved_tensor_raises")
def _inplace(ctx: Context) -> str:
    x = torch.ones(3, requires_grad=True)
    y = x.sigmoid()
    z = (y * 2).sum() + y.sum()
    y.mul_(2)  # sigmoid's backward needs its output
    try:
        z.backward()
    except RuntimeError as exc:
        assert "modified by an inplace operation" in str(exc), str(exc)
        return "RuntimeError at backward"
    raise AssertionError("an in-place change to a tensor needed for backward did not raise")


@check("tensor.grads_accumulate_until_zero_grad")
def _accumulate(ctx: Context) -> str:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.ones(2, 3)
    model(x).sum().backward()
    assert model.weight.grad is not None
    first = model.weight.grad.clone()
    model(x).sum().backward()
    close(model.weight.grad, 2 * first, "gradient after two backward calls")
    opt.zero_grad()
    assert model.weight.grad is None or float(model.weight.grad.abs().sum()) == 0.0, "zero_grad left a gradient"
    return "2x after two backward calls, cleared by zero_grad"


@check("train.adam_lowers_loss")
def _adam(ctx: Context) -> str:
    found = []
    for dev in on_devices(ctx):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(dev)
        x = torch.randn(256, 8, device=dev)
        y = x.sum(dim=1, keepdim=True)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(50):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0] * 0.5, f"loss {losses[0]:.3f} -> {losses[-1]:.3f} on {dev}"
        found.append(f"{dev}: {losses[0]:.2f} -> {losses[-1]:.3f}")
    return "; ".join(found)


@check("data.dataloader_two_workers")
def _loader(ctx: Context) -> str:
    data = torch.utils.data.TensorDataset(torch.arange(64.0).reshape(32, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=2)
    total = sum(batch[0].sum().item() for batch in loader)
    assert total == sum(range(64)), f"workers returned a total of {total}"
    return "2 workers over shared memory"


@check("audio.torchaudio")
def _audio(ctx: Context) -> str:
    import torchaudio

    wave = torch.sin(torch.linspace(0, 100, 16000)).unsqueeze(0)
    spec = torchaudio.transforms.Spectrogram(n_fft=400)(wave)
    assert spec.shape[1] == 201, f"spectrogram shape {tuple(spec.shape)}"
    return f"torchaudio {torchaudio.__version__}"


@check("compile.cpu")
def _compile_cpu(ctx: Context) -> str:
    fn = torch.compile(lambda x: (x.sin() ** 2 + x.cos() ** 2).sum())
    value = float(fn(torch.randn(1000)))
    assert abs(value - 1000.0) < 1e-2, f"compiled function returned {value}"
    return "Inductor built a CPU kernel with the image's g++"


# ---- devel images: the toolkit compiles CUDA code (smoke_tests/devel.py) -----------------------------


@check("devel.nvcc")
def _nvcc(ctx: Context) -> str:
    return devel.nvcc(ctx.expect)


@check("devel.load_inline_compiles")
def _inline_compiles(ctx: Context) -> str:
    return devel.inline_compiles(ctx.expect)


@check("devel.load_inline_runs")
def _inline_runs(ctx: Context) -> str:
    need_gpu(ctx)
    return devel.inline_runs(ctx.expect)


@check("devel.cuda_extension_installs")
def _extension_installs(ctx: Context) -> str:
    return devel.extension_installs(ctx.expect)


@check("devel.cuda_extension_runs")
def _extension_runs(ctx: Context) -> str:
    need_gpu(ctx)
    return devel.extension_runs(ctx.expect)


def expectations(path: str) -> dict[str, Any]:
    """What the image claims about itself; outside an imgbuild image, nothing (version checks SKIP)."""
    try:
        data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data
