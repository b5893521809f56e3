"""Small ``nn.Module`` stand-ins for the torchvision/timm models that were outliers (#22).

torchvision cannot be installed beside CPU torch here (and ``timm`` imports it), so each
model below reproduces the pattern that made the real one slow or large, with random
weights and a 32x32 image:

- ``nf_resnet``: weight standardisation in ``forward`` (timm's ``ScaledStdConv2d`` through
  ``F.batch_norm(weight.reshape(1, out, -1), training=True)`` and ``StdConv2d``'s
  ``(w - mean) / sqrt(var + eps)``), scaled activations and a skip-init gain.
- ``resnet_d``: a deep stem and the ResNet-D shortcut (``AvgPool2d(2, ceil_mode=True,
  count_include_pad=False)`` before the 1x1 conv), BatchNorm everywhere.
- ``swin``: shifted-window attention: window partition/reverse by view/permute,
  ``torch.roll``, a constant attention mask, a relative position bias table gathered by a
  constant index buffer.
- ``maxvit``: MBConv (depthwise + SE) then block and grid attention with relative
  position bias.
- ``convmixer``: deep depthwise ``padding="same"`` conv stacks with residuals, GELU, BN.
- ``efficientnet``: MBConv blocks with squeeze-and-excitation and SiLU.
- ``tresnet``: space-to-depth stem, an anti-aliasing blur (a constant filter buffer in
  a grouped conv), leaky ReLU and SE.
- ``xcit``: cross-covariance attention (``F.normalize`` of q and k, a temperature
  parameter) with Fourier position features built in ``forward``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


# -- nf_resnet -------------------------------------------------------------------------------


class ScaledStdConv2d(nn.Conv2d):
    """timm's pattern: standardise the weight with ``F.batch_norm`` at every call."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> None:
        super().__init__(cin, cout, k, stride, padding=k // 2, groups=groups)
        self.gain = nn.Parameter(torch.ones(cout, 1, 1, 1))
        self.scale = (cin // groups * k * k) ** -0.5
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = F.batch_norm(
            self.weight.reshape(1, self.out_channels, -1),
            None,
            None,
            weight=(self.gain * self.scale).view(-1),
            training=True,
            momentum=0.0,
            eps=self.eps,
        ).reshape_as(self.weight)
        return F.conv2d(x, weight, self.bias, self.stride, self.padding, 1, self.groups)


class StdConv2d(nn.Conv2d):
    """resnetv2's pattern: ``(w - mean) / sqrt(var + eps)`` with ``torch.var_mean``."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1) -> None:
        super().__init__(cin, cout, k, stride, padding=k // 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var, mean = torch.var_mean(self.weight, dim=[1, 2, 3], keepdim=True, unbiased=False)
        weight = (self.weight - mean) / torch.sqrt(var + 1e-8)
        return F.conv2d(x, weight, None, self.stride, self.padding)


class _NFBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, alpha: float, beta: float) -> None:
        super().__init__()
        self.alpha, self.beta = alpha, beta
        mid = cout // 2
        self.down = ScaledStdConv2d(cin, cout, 1, stride) if stride > 1 or cin != cout else None
        self.conv1 = ScaledStdConv2d(cin, mid, 1)
        self.conv2 = ScaledStdConv2d(mid, mid, 3, stride, groups=2)
        self.conv3 = StdConv2d(mid, cout, 1)
        self.skipinit_gain = nn.Parameter(torch.full((), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(x) * self.beta
        shortcut = self.down(out) if self.down is not None else x
        out = self.conv3(F.relu(self.conv2(F.relu(self.conv1(out)))))
        return out * self.alpha * self.skipinit_gain + shortcut


class NFResNet(nn.Module):
    def __init__(self, width: int = 16, blocks: int = 6) -> None:
        super().__init__()
        self.stem = ScaledStdConv2d(3, width, 3, 2)
        layers, cin, expected = [], width, 1.0
        for i in range(blocks):
            cout = width * (2 ** (i // 2))
            layers.append(_NFBlock(cin, cout, 2 if i % 2 == 0 and i else 1, 0.2, 1 / expected))
            expected = math.sqrt(expected**2 + 0.2**2)
            cin = cout
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(cin, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


# -- resnet_d --------------------------------------------------------------------------------


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)
    )


class _BottleneckD(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        mid = cout // 4
        self.conv1, self.conv2 = _conv_bn(cin, mid, 1), _conv_bn(mid, mid, 3, stride)
        self.conv3 = _conv_bn(mid, cout, 1)
        self.down: nn.Module = nn.Identity()
        if stride > 1 or cin != cout:
            pool = nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False)
            self.down = nn.Sequential(pool if stride > 1 else nn.Identity(), _conv_bn(cin, cout, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv3(F.relu(self.conv2(F.relu(self.conv1(x)))))
        return F.relu(out + self.down(x))


class ResNetD(nn.Module):
    def __init__(self, width: int = 32, blocks: int = 6) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            _conv_bn(3, 16, 3, 2), nn.ReLU(), _conv_bn(16, 16, 3), nn.ReLU(), _conv_bn(16, 32, 3)
        )
        self.pool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 32
        for i in range(blocks):
            cout = width * 2 * (2 ** (i // 2))
            layers.append(_BottleneckD(cin, cout, 2 if i % 2 == 0 and i else 1))
            cin = cout
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(cin, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.stem(x)))
        return self.head(self.blocks(x).mean((2, 3)))


# -- window attention (swin, maxvit) ---------------------------------------------------------


def _relative_index(window: int) -> torch.Tensor:
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij"))
    flat = coords.flatten(1)
    rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += window - 1
    rel[:, :, 1] += window - 1
    rel[:, :, 0] *= 2 * window - 1
    return rel.sum(-1)


class _WindowAttention(nn.Module):
    """Attention inside windows with a relative position bias gathered by a constant index."""

    def __init__(self, dim: int, heads: int, window: int) -> None:
        super().__init__()
        self.heads, self.window = heads, window
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(
            torch.randn((2 * window - 1) ** 2, heads) * 0.02
        )
        self.register_buffer("relative_position_index", _relative_index(window), persistent=False)

    def bias(self) -> torch.Tensor:
        n = self.window * self.window
        table = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        return table.view(n, n, -1).permute(2, 0, 1).contiguous().unsqueeze(0)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1) + self.bias()
        if mask is not None:
            windows = mask.shape[0]
            attn = attn.view(b // windows, windows, self.heads, n, n) + mask.unsqueeze(1)
            attn = attn.view(-1, self.heads, n, n)
        out = (attn.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(out)


def _partition(x: torch.Tensor, w: int) -> torch.Tensor:
    b, h, wd, c = x.shape
    x = x.view(b, h // w, w, wd // w, w, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, w * w, c)


def _reverse(windows: torch.Tensor, w: int, h: int, wd: int) -> torch.Tensor:
    c = windows.shape[-1]
    x = windows.view(-1, h // w, wd // w, w, w, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, h, wd, c)


def _shift_mask(size: int, window: int, shift: int) -> torch.Tensor:
    img = torch.zeros(1, size, size, 1)
    count = 0
    for hs in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
        for ws in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
            img[:, hs, ws, :] = count
            count += 1
    windows = _partition(img, window).squeeze(-1)
    mask = windows.unsqueeze(1) - windows.unsqueeze(2)
    return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)


class _SwinBlock(nn.Module):
    def __init__(self, dim: int, heads: int, size: int, window: int, shift: int) -> None:
        super().__init__()
        self.size, self.window, self.shift = size, window, shift
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = _WindowAttention(dim, heads, window)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        mask = _shift_mask(size, window, shift) if shift else None
        self.register_buffer("attn_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, hw, c = x.shape
        h = x.view(b, self.size, self.size, c)
        h = self.norm1(h)
        if self.shift:
            h = torch.roll(h, (-self.shift, -self.shift), (1, 2))
        h = self.attn(_partition(h, self.window), self.attn_mask)
        h = _reverse(h, self.window, self.size, self.size)
        if self.shift:
            h = torch.roll(h, (self.shift, self.shift), (1, 2))
        x = x + h.reshape(b, hw, c)
        return x + self.mlp(self.norm2(x))


class Swin(nn.Module):
    def __init__(self, dim: int = 32, depth: int = 4, size: int = 8, window: int = 4) -> None:
        super().__init__()
        self.size = size
        self.embed = nn.Conv2d(3, dim, 4, 4)
        self.norm = nn.LayerNorm(dim)
        self.blocks = nn.Sequential(
            *[_SwinBlock(dim, 4, size, window, window // 2 if i % 2 else 0) for i in range(depth)]
        )
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.embed(x).flatten(2).transpose(1, 2))
        return self.head(self.blocks(x).mean(1))


class _SqueezeExcite(nn.Module):
    def __init__(self, dim: int, reduced: int, act: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.reduce, self.expand, self.act = (
            nn.Conv2d(dim, reduced, 1),
            nn.Conv2d(reduced, dim, 1),
            act,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.expand(self.act(self.reduce(x.mean((2, 3), keepdim=True)))))


class _MBConv(nn.Module):
    """EfficientNet's inverted residual: expand, depthwise, SE, project."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int = 4) -> None:
        super().__init__()
        mid = cin * expand
        self.expand = _conv_bn(cin, mid, 1)
        self.dw = _conv_bn(mid, mid, 3, stride, groups=mid)
        self.se = _SqueezeExcite(mid, max(1, cin // 4), F.silu)
        self.project = _conv_bn(mid, cout, 1)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.project(self.se(F.silu(self.dw(F.silu(self.expand(x))))))
        return out + x if self.residual else out


class _GridAttention(nn.Module):
    """MaxViT's block (local windows) or grid (dilated) attention over an NCHW map."""

    def __init__(self, dim: int, window: int, grid: bool) -> None:
        super().__init__()
        self.window, self.grid = window, grid
        self.norm = nn.LayerNorm(dim)
        self.attn = _WindowAttention(dim, 2, window)
        self.mlp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(),
                                 nn.Linear(2 * dim, dim))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        p = self.window
        t = x.permute(0, 2, 3, 1)
        if self.grid:
            t = t.view(b, p, h // p, p, w // p, c).permute(0, 2, 4, 1, 3, 5)
        else:
            t = t.view(b, h // p, p, w // p, p, c).permute(0, 1, 3, 2, 4, 5)
        t = t.reshape(-1, p * p, c)
        t = t + self.attn(self.norm(t))
        t = t + self.mlp(t)
        if self.grid:
            t = t.view(b, h // p, w // p, p, p, c).permute(0, 3, 1, 4, 2, 5)
        else:
            t = t.view(b, h // p, w // p, p, p, c).permute(0, 1, 3, 2, 4, 5)
        return t.reshape(b, h, w, c).permute(0, 3, 1, 2)


class MaxViT(nn.Module):
    def __init__(self, dim: int = 32, stages: int = 2, window: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, dim, 3, 2), nn.GELU())
        layers: list[nn.Module] = []
        for _ in range(stages):
            layers += [_MBConv(dim, dim, 1), _GridAttention(dim, window, False),
                       _GridAttention(dim, window, True)]  # fmt: skip
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


# -- convmixer, efficientnet, tresnet, xcit --------------------------------------------------


class _Residual(nn.Module):
    def __init__(self, fn: nn.Module) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x) + x


class ConvMixer(nn.Module):
    def __init__(self, dim: int = 64, depth: int = 12, kernel: int = 9, patch: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, patch, patch), nn.GELU(), nn.BatchNorm2d(dim))
        self.blocks = nn.Sequential(*[
            nn.Sequential(
                _Residual(nn.Sequential(
                    nn.Conv2d(dim, dim, kernel, groups=dim, padding="same"),
                    nn.GELU(), nn.BatchNorm2d(dim))),
                nn.Conv2d(dim, dim, 1), nn.GELU(), nn.BatchNorm2d(dim))
            for _ in range(depth)
        ])  # fmt: skip
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class EfficientNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 16, 3, 2), nn.SiLU())
        chans = [(16, 16, 1), (16, 24, 2), (24, 24, 1), (24, 40, 2), (40, 40, 1), (40, 80, 2)]
        self.blocks = nn.Sequential(*[_MBConv(a, b, s) for a, b, s in chans])
        self.head = nn.Sequential(_conv_bn(80, 128, 1), nn.SiLU())
        self.fc = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


class _BlurPool(nn.Module):
    """Anti-aliased downsampling: a fixed binomial filter in a grouped, strided conv."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        a = torch.tensor([1.0, 2.0, 1.0])
        filt = (a[:, None] * a[None, :]) / 16.0
        self.register_buffer("filt", filt[None, None].repeat(channels, 1, 1, 1))
        self.channels = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(F.pad(x, (1, 1, 1, 1), "reflect"), self.filt, stride=2,
                        groups=self.channels)  # fmt: skip


class _TBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = _conv_bn(cin, cout, 3)
        self.blur = _BlurPool(cout) if stride > 1 else nn.Identity()
        self.conv2 = _conv_bn(cout, cout, 3)
        self.se = _SqueezeExcite(cout, max(8, cout // 4), F.relu)
        self.down: nn.Module = nn.Identity()
        if stride > 1 or cin != cout:
            pool = nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False)
            self.down = nn.Sequential(pool if stride > 1 else nn.Identity(), _conv_bn(cin, cout, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.blur(F.leaky_relu(self.conv1(x), 1e-3))
        out = self.se(self.conv2(out))
        return F.relu(out + self.down(x))


class TResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = _conv_bn(48, 32, 3)
        chans = [(32, 32, 1), (32, 64, 2), (64, 64, 1), (64, 128, 2)]
        self.blocks = nn.Sequential(*[_TBlock(a, b, s) for a, b, s in chans])
        self.head = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape  # space to depth, 4x4 blocks
        x = x.view(b, c, h // 4, 4, w // 4, 4).permute(0, 3, 5, 1, 2, 4)
        x = x.reshape(b, c * 16, h // 4, w // 4)
        x = F.leaky_relu(self.stem(x), 1e-2)
        return self.head(self.blocks(x).mean((2, 3)))


class _FourierPositions(nn.Module):
    def __init__(self, dim: int, hidden: int = 16) -> None:
        super().__init__()
        self.hidden = hidden
        self.proj = nn.Conv2d(hidden * 2, dim, 1)

    def forward(self, b: int, h: int, w: int) -> torch.Tensor:
        y = torch.arange(1, h + 1, dtype=torch.float32)[None, :, None].expand(b, h, w)
        x = torch.arange(1, w + 1, dtype=torch.float32)[None, None, :].expand(b, h, w)
        y, x = y / (h + 1e-6) * 2 * math.pi, x / (w + 1e-6) * 2 * math.pi
        t = torch.arange(self.hidden, dtype=torch.float32)
        t = 10000 ** (2 * torch.div(t, 2, rounding_mode="floor") / self.hidden)
        py, px = y[..., None] / t, x[..., None] / t
        py = torch.stack([py[..., 0::2].sin(), py[..., 1::2].cos()], 4).flatten(3)
        px = torch.stack([px[..., 0::2].sin(), px[..., 1::2].cos()], 4).flatten(3)
        return self.proj(torch.cat((py, px), 3).permute(0, 3, 1, 2))


class _XCA(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 4, 1)
        q, k, v = qkv.unbind(0)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        attn = ((q @ k.transpose(-2, -1)) * self.temperature).softmax(-1)
        return self.proj((attn @ v).permute(0, 3, 1, 2).reshape(b, n, c))


class XCiT(nn.Module):
    def __init__(self, dim: int = 32, depth: int = 4) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, dim, 4, 4)
        self.pos = _FourierPositions(dim)
        self.blocks = nn.ModuleList(_XCA(dim, 4) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.gammas = nn.ParameterList(nn.Parameter(torch.full((dim,), 0.1)) for _ in range(depth))
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        b, _, h, w = x.shape
        x = (x + self.pos(b, h, w)).flatten(2).transpose(1, 2)
        for block, norm, gamma in zip(self.blocks, self.norms, self.gammas, strict=True):
            x = x + gamma * block(norm(x))
        return self.head(x.mean(1))


# -- the set ---------------------------------------------------------------------------------

STANDINS: dict[str, Callable[[], nn.Module]] = {
    "nf_resnet": NFResNet,
    "resnet_d": ResNetD,
    "swin_window": Swin,
    "maxvit": MaxViT,
    "convmixer": ConvMixer,
    "efficientnet_se": EfficientNet,
    "tresnet": TResNet,
    "xcit": XCiT,
}


def build(name: str) -> tuple[nn.Module, Inputs]:
    """The stand-in ``name`` (eval mode, seeded weights, BatchNorm statistics) and an image."""
    torch.manual_seed(0)
    model = STANDINS[name]().eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    return model, ((torch.randn(1, 3, 32, 32),), {})
