"""Plain-torch stand-ins for the model families of issue #39, each with a dynamic axis.

No hub downloads and no extra libraries: each class below is written here, with random
weights, and mirrors the op mix of the real architecture (scaled down so that a run on a
shared 2-core machine stays short):

- ``diffusion/unet2d_cond``: diffusers' ``UNet2DConditionModel``: sinusoidal timestep
  embedding, ResNet blocks (GroupNorm, SiLU, time projection), transformer blocks with
  self-attention, cross-attention on text states and GEGLU feed-forward, strided-conv
  down- and nearest-upsampling with skip concatenation. Dynamic batch.
- ``diffusion/vae_decoder``: diffusers' ``AutoencoderKL`` decoder: conv_in, a mid block
  (ResNet, single-head spatial self-attention, ResNet), up blocks with nearest upsampling,
  GroupNorm + SiLU + conv_out. Dynamic height and width.
- ``sam/vit_encoder``: segment-anything's ``ImageEncoderViT``: 16x16 patch embedding,
  absolute position embedding, windowed attention (pad to the window, partition,
  unpartition) with decomposed relative positions (``get_rel_pos`` + einsum), global
  attention blocks, a conv neck with channel LayerNorm. Dynamic batch.
- ``audio/whisper_encoder``: openai-whisper's ``AudioEncoder`` at tiny's size: two GELU
  conv1d (the second strided) on 3000 mel frames, the 1500-position sinusoidal table
  (whisper's shape assertion kept), pre-LN residual attention blocks (key without bias;
  ``scaled_dot_product_attention``, the default path of openai-whisper's current
  release), ``ln_post``. Dynamic batch, an example of batch 1 (as whisper is exported).
- ``audio/whisper_decoder``: whisper's ``TextDecoder``: token and learned position
  embeddings, causal self-attention (SDPA with ``is_causal=mask is not None and n_ctx >
  1``, which torch.onnx cannot capture with dynamic tokens), cross-attention on the audio
  features, logits through the tied embedding. Dynamic tokens and audio frames.
  ``audio/whisper_decoder_no_sdpa``: the same on whisper's ``disable_sdpa()`` path (the
  scores written out, the causal mask added), which both exporters capture.
- ``medical/unet3d``: MONAI's ``UNet``: Conv3d + InstanceNorm3d + PReLU units with residual
  strided convs, ConvTranspose3d up path with skip concatenation. Dynamic batch.
- ``detection/yolo``: an ultralytics-style YOLOv8: Conv-BN-SiLU, C2f blocks (chunk and
  concat), SPPF (max pools), a PAN neck (upsample + concat), the anchor-free detect head
  with DFL (softmax over 16 bins, a fixed arange conv), anchors made from the feature
  maps' dynamic sizes (arange + meshgrid) and ``dist2bbox`` decoding. Dynamic H and W
  (multiples of 32).
- ``graph/gnn``: torch_geometric-style message passing on ``edge_index``: GCN layers with
  degree normalisation (``index_add``/``scatter_add``), a GAT layer with a scatter
  softmax (``scatter_reduce`` amax), a mean readout. Dynamic nodes and edges.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

#: ``(model, (args, kwargs), dynamic_shapes)``.
Case = tuple[nn.Module, tuple[tuple[Any, ...], dict[str, Any]], Any]


# -- diffusion: UNet2DCondition ---------------------------------------------------------------


def _timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class _ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, temb: int | None) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(8, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time = nn.Linear(temb, cout) if temb else None
        self.norm2 = nn.GroupNorm(8, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor | None = None) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        if self.time is not None and temb is not None:
            h = h + self.time(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int, context: int | None = None) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(context or dim, dim, bias=False)
        self.v = nn.Linear(context or dim, dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        context = x if context is None else context
        b, n, d = x.shape
        q = self.q(x).view(b, -1, self.heads, d // self.heads).transpose(1, 2)
        k = self.k(context).view(b, -1, self.heads, d // self.heads).transpose(1, 2)
        v = self.v(context).view(b, -1, self.heads, d // self.heads).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out(out.transpose(1, 2).reshape(b, n, d))


class _GEGLU(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim * 8)
        self.out = nn.Linear(dim * 4, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, gate = self.proj(x).chunk(2, dim=-1)
        return self.out(h * F.gelu(gate))


class _Transformer2D(nn.Module):
    def __init__(self, dim: int, context: int, heads: int = 4) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(8, dim, eps=1e-6)
        self.proj_in = nn.Linear(dim, dim)
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn1 = _Attention(dim, heads)
        self.attn2 = _Attention(dim, heads, context)
        self.ff = _GEGLU(dim)
        self.proj_out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        hidden = self.norm(x).permute(0, 2, 3, 1).reshape(b, h * w, c)
        hidden = self.proj_in(hidden)
        hidden = hidden + self.attn1(self.ln1(hidden))
        hidden = hidden + self.attn2(self.ln2(hidden), context)
        hidden = hidden + self.ff(self.ln3(hidden))
        hidden = self.proj_out(hidden).reshape(b, h, w, c).permute(0, 3, 1, 2)
        return hidden + x


class UNet2DCondition(nn.Module):
    """diffusers' UNet2DConditionModel pattern: 3 levels, cross-attention at the lower two."""

    def __init__(self, ch: tuple[int, ...] = (32, 64, 64), context: int = 64) -> None:
        super().__init__()
        temb = ch[0] * 4
        self.time_mlp = nn.Sequential(nn.Linear(ch[0], temb), nn.SiLU(), nn.Linear(temb, temb))
        self.conv_in = nn.Conv2d(4, ch[0], 3, padding=1)
        self.down_res = nn.ModuleList()
        self.down_attn = nn.ModuleList()
        self.downsamplers = nn.ModuleList()
        cin = ch[0]
        for i, c in enumerate(ch):
            self.down_res.append(_ResBlock(cin, c, temb))
            self.down_attn.append(_Transformer2D(c, context) if i > 0 else nn.Identity())
            self.downsamplers.append(nn.Conv2d(c, c, 3, 2, 1) if i < len(ch) - 1 else None)
            cin = c
        self.mid_res1 = _ResBlock(cin, cin, temb)
        self.mid_attn = _Transformer2D(cin, context)
        self.mid_res2 = _ResBlock(cin, cin, temb)
        self.up_res = nn.ModuleList()
        self.up_attn = nn.ModuleList()
        self.upsamplers = nn.ModuleList()
        for i, c in reversed(list(enumerate(ch))):
            self.up_res.append(_ResBlock(cin + c, c, temb))
            self.up_attn.append(_Transformer2D(c, context) if i > 0 else nn.Identity())
            self.upsamplers.append(nn.Conv2d(c, c, 3, padding=1) if i > 0 else None)
            cin = c
        self.norm_out = nn.GroupNorm(8, cin)
        self.conv_out = nn.Conv2d(cin, 4, 3, padding=1)
        self.base = ch[0]

    def forward(
        self, sample: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor
    ) -> torch.Tensor:
        temb = self.time_mlp(_timestep_embedding(timestep, self.base))
        x = self.conv_in(sample)
        skips = []
        for res, attn, down in zip(self.down_res, self.down_attn, self.downsamplers, strict=True):
            x = res(x, temb)
            x = attn(x, encoder_hidden_states) if not isinstance(attn, nn.Identity) else x
            skips.append(x)
            if down is not None:
                x = down(x)
        x = self.mid_res2(self.mid_attn(self.mid_res1(x, temb), encoder_hidden_states), temb)
        for res, attn, up in zip(self.up_res, self.up_attn, self.upsamplers, strict=True):
            x = res(torch.cat([x, skips.pop()], dim=1), temb)
            x = attn(x, encoder_hidden_states) if not isinstance(attn, nn.Identity) else x
            if up is not None:
                x = up(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return self.conv_out(F.silu(self.norm_out(x)))


def _unet() -> Case:
    model = UNet2DCondition()
    args = (torch.randn(2, 4, 16, 16), torch.tensor([10, 500]), torch.randn(2, 12, 64))
    batch = Dim("batch", min=1, max=64)
    return model, (args, {}), ({0: batch}, {0: batch}, {0: batch})


# -- diffusion: VAE decoder -------------------------------------------------------------------


class _SpatialAttention(nn.Module):
    """diffusers' VAE mid-block attention: one head over every pixel, GroupNorm first."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(8, c)
        self.q, self.k, self.v, self.o = (nn.Linear(c, c) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        t = self.norm(x).view(b, c, h * w).transpose(1, 2)
        q, k, v = self.q(t), self.k(t), self.v(t)
        attn = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(c), dim=-1)
        out = self.o(attn @ v).transpose(1, 2).reshape(b, c, h, w)
        return x + out


class VAEDecoder(nn.Module):
    """AutoencoderKL's decoder: 4 latent channels to an RGB image 4x larger."""

    def __init__(self, ch: tuple[int, ...] = (64, 64, 32)) -> None:
        super().__init__()
        self.post_quant = nn.Conv2d(4, 4, 1)
        self.conv_in = nn.Conv2d(4, ch[0], 3, padding=1)
        self.mid = nn.Sequential(
            _ResBlock(ch[0], ch[0], None), _SpatialAttention(ch[0]), _ResBlock(ch[0], ch[0], None)
        )
        blocks: list[nn.Module] = []
        cin = ch[0]
        for i, c in enumerate(ch):
            blocks += [_ResBlock(cin, c, None), _ResBlock(c, c, None)]
            if i < len(ch) - 1:
                blocks.append(_Upsample(c))
            cin = c
        self.up = nn.Sequential(*blocks)
        self.norm_out = nn.GroupNorm(8, cin)
        self.conv_out = nn.Conv2d(cin, 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(self.post_quant(z / 0.18215))
        x = self.up(self.mid(x))
        return self.conv_out(F.silu(self.norm_out(x)))


class _Upsample(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def _vae() -> Case:
    height, width = Dim("height", min=2, max=128), Dim("width", min=2, max=128)
    return VAEDecoder(), ((torch.randn(1, 4, 16, 12),), {}), ({2: height, 3: width},)


# -- SAM image encoder ------------------------------------------------------------------------


def _get_rel_pos(q_size: int, k_size: int, rel_pos: torch.Tensor) -> torch.Tensor:
    coords = torch.arange(q_size)[:, None] - torch.arange(k_size)[None, :] + (k_size - 1)
    return rel_pos[coords.long()]


class _SamAttention(nn.Module):
    def __init__(self, dim: int, heads: int, size: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.rel_pos_h = nn.Parameter(torch.randn(2 * size - 1, dim // heads) * 0.02)
        self.rel_pos_w = nn.Parameter(torch.randn(2 * size - 1, dim // heads) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, _ = x.shape
        qkv = self.qkv(x).reshape(b, h * w, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.reshape(3, b * self.heads, h * w, -1).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        rh, rw = _get_rel_pos(h, h, self.rel_pos_h), _get_rel_pos(w, w, self.rel_pos_w)
        r_q = q.reshape(b * self.heads, h, w, -1)
        rel_h = torch.einsum("bhwc,hkc->bhwk", r_q, rh)
        rel_w = torch.einsum("bhwc,wkc->bhwk", r_q, rw)
        attn = attn.view(b * self.heads, h, w, h, w) + rel_h[:, :, :, :, None]
        attn = (attn + rel_w[:, :, :, None, :]).view(b * self.heads, h * w, h * w)
        out = (attn.softmax(dim=-1) @ v).view(b, self.heads, h, w, -1)
        return self.proj(out.permute(0, 2, 3, 1, 4).reshape(b, h, w, -1))


class _SamBlock(nn.Module):
    def __init__(self, dim: int, heads: int, window: int, grid: int) -> None:
        super().__init__()
        self.window = window
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = _SamAttention(dim, heads, window if window > 0 else grid)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.norm1(x)
        if self.window > 0:
            b, h, w, c = x.shape
            ws = self.window
            pad_h, pad_w = (ws - h % ws) % ws, (ws - w % ws) % ws
            x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
            hp, wp = h + pad_h, w + pad_w
            x = x.view(b, hp // ws, ws, wp // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
            x = self.attn(x.reshape(-1, ws, ws, c))
            x = x.view(b, hp // ws, wp // ws, ws, ws, -1).permute(0, 1, 3, 2, 4, 5)
            x = x.reshape(b, hp, wp, -1)[:, :h, :w, :].contiguous()
        else:
            x = self.attn(x)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class _LayerNorm2d(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + 1e-6)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class SamEncoder(nn.Module):
    """ImageEncoderViT: 128x128 images (an 8x8 grid), windows of 5 (padded), 2 global blocks."""

    def __init__(self, dim: int = 96, depth: int = 6, heads: int = 4, image: int = 128) -> None:
        super().__init__()
        grid = image // 16
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.pos = nn.Parameter(torch.randn(1, grid, grid, dim) * 0.02)
        glob = {depth // 2 - 1, depth - 1}
        self.blocks = nn.ModuleList(
            _SamBlock(dim, heads, 0 if i in glob else 5, grid) for i in range(depth)
        )
        self.neck = nn.Sequential(
            nn.Conv2d(dim, 64, 1, bias=False),
            _LayerNorm2d(64),
            nn.Conv2d(64, 64, 3, padding=1, bias=False),
            _LayerNorm2d(64),
        )

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.patch(image).permute(0, 2, 3, 1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.neck(x.permute(0, 3, 1, 2))


def _sam() -> Case:
    return SamEncoder(), ((torch.randn(2, 3, 128, 128),), {}), ({0: Dim("batch", max=32)},)


# -- whisper ----------------------------------------------------------------------------------


def _sinusoids(length: int, channels: int) -> torch.Tensor:
    increment = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-increment * torch.arange(channels // 2))
    scaled = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


class _WhisperAttention(nn.Module):
    """openai-whisper's MultiHeadAttention: on its default path (``use_sdpa``: PyTorch's
    ``scaled_dot_product_attention``, causal where a mask is given and there is more
    than one query), as its current release runs it, or on the path its
    ``disable_sdpa()`` selects (scores, the mask added, softmax in float32)."""

    def __init__(self, dim: int, heads: int, use_sdpa: bool = True) -> None:
        super().__init__()
        self.heads, self.use_sdpa = heads, use_sdpa
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(
        self, x: torch.Tensor, xa: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        source = x if xa is None else xa
        q, k, v = self.query(x), self.key(source), self.value(source)
        n = q.shape[1]
        q = q.view(*q.shape[:2], self.heads, -1).permute(0, 2, 1, 3)
        k = k.view(*k.shape[:2], self.heads, -1).permute(0, 2, 1, 3)
        v = v.view(*v.shape[:2], self.heads, -1).permute(0, 2, 1, 3)
        if self.use_sdpa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=mask is not None and n > 1)
        else:
            scale = q.shape[-1] ** -0.25
            qk = (q * scale) @ (k * scale).transpose(-1, -2)
            if mask is not None:
                qk = qk + mask[:n, :n]
            a = F.softmax(qk.float(), dim=-1).to(q.dtype) @ v
        return self.out(a.permute(0, 2, 1, 3).flatten(start_dim=2))


class _WhisperBlock(nn.Module):
    def __init__(self, dim: int, heads: int, cross: bool) -> None:
        super().__init__()
        self.attn, self.attn_ln = _WhisperAttention(dim, heads), nn.LayerNorm(dim)
        self.cross = _WhisperAttention(dim, heads) if cross else None
        self.cross_ln = nn.LayerNorm(dim) if cross else None
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))
        self.mlp_ln = nn.LayerNorm(dim)

    def forward(
        self, x: torch.Tensor, xa: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = x + self.attn(self.attn_ln(x), mask=mask)
        if self.cross is not None and self.cross_ln is not None:
            x = x + self.cross(self.cross_ln(x), xa)
        return x + self.mlp(self.mlp_ln(x))


class WhisperEncoder(nn.Module):
    """whisper's AudioEncoder (tiny's width and depth: 384, 4 layers, 6 heads)."""

    def __init__(self, mels: int = 80, ctx: int = 1500, dim: int = 384, layers: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(mels, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)
        self.register_buffer("positional_embedding", _sinusoids(ctx, dim))
        self.blocks = nn.ModuleList(_WhisperBlock(dim, 6, False) for _ in range(layers))
        self.ln_post = nn.LayerNorm(dim)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).permute(0, 2, 1)
        assert x.shape[1:] == self.positional_embedding.shape, "incorrect audio shape"
        x = x + self.positional_embedding
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


def _whisper_encoder() -> Case:
    # As whisper is exported: 30 s of audio (3000 mel frames, 1500 positions, asserted),
    # one example, a dynamic batch.
    return WhisperEncoder(), ((torch.randn(1, 80, 3000),), {}), {"mel": {0: "batch"}}


class WhisperDecoder(nn.Module):
    """whisper's TextDecoder (tiny's width; a 4k vocabulary in place of 51865)."""

    def __init__(self, vocab: int = 4096, ctx: int = 448, dim: int = 384, layers: int = 4) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, dim)
        self.positional_embedding = nn.Parameter(torch.randn(ctx, dim) * 0.02)
        self.blocks = nn.ModuleList(_WhisperBlock(dim, 6, True) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.register_buffer("mask", torch.empty(ctx, ctx).fill_(-math.inf).triu_(1))

    def forward(self, tokens: torch.Tensor, audio: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(tokens) + self.positional_embedding[: tokens.shape[-1]]
        for block in self.blocks:
            x = block(x, audio, mask=self.mask)
        x = self.ln(x)
        return (x @ self.token_embedding.weight.t()).float()


def _whisper_decoder(use_sdpa: bool = True) -> Case:
    tokens, frames = Dim("tokens", min=2, max=448), Dim("audio", min=2, max=1500)
    args = (torch.randint(0, 4096, (1, 24)), torch.randn(1, 300, 384))
    model = WhisperDecoder()
    for attention in model.modules():
        if isinstance(attention, _WhisperAttention):
            attention.use_sdpa = use_sdpa
    return model, (args, {}), ({1: tokens}, {1: frames})


def _whisper_decoder_no_sdpa() -> Case:
    # whisper's disable_sdpa() path: what a torch.onnx user needs, since torch.onnx cannot
    # capture the default path with dynamic tokens (SDPA's is_causal is then a SymBool).
    return _whisper_decoder(use_sdpa=False)


# -- MONAI-style 3-D UNet ---------------------------------------------------------------------


class _Unit3d(nn.Module):
    """MONAI's ResidualUnit: (Conv3d, InstanceNorm3d, PReLU) x 2 with a strided residual."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv3d(cin, cout, 3, stride, 1),
            nn.InstanceNorm3d(cout, affine=True),
            nn.PReLU(),
            nn.Conv3d(cout, cout, 3, 1, 1),
            nn.InstanceNorm3d(cout, affine=True),
            nn.PReLU(),
        )
        self.residual = nn.Conv3d(cin, cout, 3 if stride > 1 else 1, stride, 1 if stride > 1 else 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + self.residual(x)


class UNet3d(nn.Module):
    """MONAI's UNet(spatial_dims=3, channels=(8, 16, 32, 64), strides=(2, 2, 2))."""

    def __init__(self, ch: tuple[int, ...] = (8, 16, 32, 64)) -> None:
        super().__init__()
        self.down = nn.ModuleList()
        cin = 1
        for i, c in enumerate(ch):
            self.down.append(_Unit3d(cin, c, 2 if i > 0 else 1))
            cin = c
        self.up = nn.ModuleList()
        for c in reversed(ch[:-1]):
            self.up.append(
                nn.ModuleDict(
                    {
                        "conv": nn.ConvTranspose3d(cin, c, 3, 2, 1, output_padding=1),
                        "norm": nn.InstanceNorm3d(c, affine=True),
                        "act": nn.PReLU(),
                        "unit": _Unit3d(2 * c, c, 1),
                    }
                )
            )
            cin = c
        self.head = nn.Conv3d(cin, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for unit in self.down:
            x = unit(x)
            skips.append(x)
        skips.pop()
        for up in self.up:
            x = up["act"](up["norm"](up["conv"](x)))  # type: ignore[operator]
            x = up["unit"](torch.cat([x, skips.pop()], dim=1))  # type: ignore[operator]
        return self.head(x)


def _unet3d() -> Case:
    return UNet3d(), ((torch.randn(2, 1, 24, 24, 24),), {}), ({0: Dim("batch", max=16)},)


# -- YOLO-style detector ----------------------------------------------------------------------


class _ConvBN(nn.Module):
    def __init__(self, cin: int, cout: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.bn(self.conv(x)))


class _Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.cv1, self.cv2 = _ConvBN(c, c, 3), _ConvBN(c, c, 3)
        self.add = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class _C2f(nn.Module):
    def __init__(self, cin: int, cout: int, n: int = 1, shortcut: bool = True) -> None:
        super().__init__()
        self.c = cout // 2
        self.cv1 = _ConvBN(cin, 2 * self.c)
        self.cv2 = _ConvBN((2 + n) * self.c, cout)
        self.m = nn.ModuleList(_Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class _SPPF(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.cv1, self.cv2 = _ConvBN(cin, cin // 2), _ConvBN(cin * 2, cout)
        self.m = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        y.extend(self.m(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


class _DFL(nn.Module):
    def __init__(self, bins: int = 16) -> None:
        super().__init__()
        self.conv = nn.Conv2d(bins, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(bins, dtype=torch.float).view(1, bins, 1, 1)
        self.bins = bins

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.bins, a).transpose(2, 1).softmax(1)).view(b, 4, a)


class Yolo(nn.Module):
    """A YOLOv8-n-like detector (width 1/4) with its decode head: boxes and class scores."""

    def __init__(self, nc: int = 20, w: tuple[int, ...] = (16, 32, 64, 128, 128)) -> None:
        super().__init__()
        self.stem = nn.Sequential(_ConvBN(3, w[0], 3, 2), _ConvBN(w[0], w[1], 3, 2))
        self.b3 = nn.Sequential(_C2f(w[1], w[1]), _ConvBN(w[1], w[2], 3, 2), _C2f(w[2], w[2], 2))
        self.b4 = nn.Sequential(_ConvBN(w[2], w[3], 3, 2), _C2f(w[3], w[3], 2))
        self.b5 = nn.Sequential(_ConvBN(w[3], w[4], 3, 2), _C2f(w[4], w[4]), _SPPF(w[4], w[4]))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.n4 = _C2f(w[4] + w[3], w[3], shortcut=False)
        self.n3 = _C2f(w[3] + w[2], w[2], shortcut=False)
        self.d3, self.p4 = _ConvBN(w[2], w[2], 3, 2), _C2f(w[2] + w[3], w[3], shortcut=False)
        self.d4, self.p5 = _ConvBN(w[3], w[3], 3, 2), _C2f(w[3] + w[4], w[4], shortcut=False)
        self.nc, self.bins = nc, 16
        c2, c3 = max(16, w[2] // 4, 64), max(w[2], nc)
        self.box = nn.ModuleList(
            nn.Sequential(_ConvBN(c, c2, 3), _ConvBN(c2, c2, 3), nn.Conv2d(c2, 4 * self.bins, 1))
            for c in (w[2], w[3], w[4])
        )
        self.cls = nn.ModuleList(
            nn.Sequential(_ConvBN(c, c3, 3), _ConvBN(c3, c3, 3), nn.Conv2d(c3, nc, 1))
            for c in (w[2], w[3], w[4])
        )
        self.dfl = _DFL(self.bins)
        self.strides = (8, 16, 32)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        p3 = self.b3(self.stem(image))
        p4 = self.b4(p3)
        p5 = self.b5(p4)
        n4 = self.n4(torch.cat([self.up(p5), p4], 1))
        n3 = self.n3(torch.cat([self.up(n4), p3], 1))
        o4 = self.p4(torch.cat([self.d3(n3), n4], 1))
        o5 = self.p5(torch.cat([self.d4(o4), p5], 1))
        feats = [
            torch.cat([box(f), cls(f)], 1)
            for f, box, cls in zip((n3, o4, o5), self.box, self.cls, strict=True)
        ]
        b = image.shape[0]
        anchors, strides = [], []
        for f, stride in zip(feats, self.strides, strict=True):
            _, _, h, w = f.shape
            sx = torch.arange(w, dtype=torch.float32) + 0.5
            sy = torch.arange(h, dtype=torch.float32) + 0.5
            yy, xx = torch.meshgrid(sy, sx, indexing="ij")
            anchors.append(torch.stack((xx, yy), -1).view(-1, 2))
            strides.append(torch.full((h * w, 1), stride, dtype=torch.float32))
        anchor = torch.cat(anchors).transpose(0, 1)
        stride_t = torch.cat(strides).transpose(0, 1)
        x = torch.cat([f.view(b, 4 * self.bins + self.nc, -1) for f in feats], 2)
        box, cls = x.split((4 * self.bins, self.nc), 1)
        lt, rb = self.dfl(box).chunk(2, 1)
        x1y1, x2y2 = anchor.unsqueeze(0) - lt, anchor.unsqueeze(0) + rb
        boxes = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * stride_t
        return torch.cat((boxes, cls.sigmoid()), 1)


def _yolo() -> Case:
    h, w = Dim("h", min=1, max=20), Dim("w", min=1, max=20)
    return Yolo(), ((torch.randn(1, 3, 96, 128),), {}), ({2: 32 * h, 3: 32 * w},)


# -- graph network ----------------------------------------------------------------------------


class _GCNConv(nn.Module):
    """torch_geometric's GCNConv: self loops, symmetric degree normalisation, index_add."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.lin = nn.Linear(cin, cout, bias=False)
        self.bias = nn.Parameter(torch.zeros(cout))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        loops = torch.arange(n).unsqueeze(0).expand(2, n)
        edges = torch.cat([edge_index, loops], 1)
        src, dst = edges[0], edges[1]
        ones = torch.ones_like(dst, dtype=x.dtype)
        deg = torch.zeros(n, dtype=x.dtype).scatter_add_(0, dst, ones)
        norm = deg.pow(-0.5)[src] * deg.pow(-0.5)[dst]
        h = self.lin(x)
        msg = h.index_select(0, src) * norm.unsqueeze(-1)
        return torch.zeros_like(h).index_add_(0, dst, msg) + self.bias


class _GATConv(nn.Module):
    """torch_geometric's GATConv (heads 4): attention logits per edge, a scatter softmax."""

    def __init__(self, cin: int, cout: int, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.cout = heads, cout
        self.lin = nn.Linear(cin, heads * cout, bias=False)
        self.att_src = nn.Parameter(torch.randn(1, heads, cout) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(1, heads, cout) * 0.1)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        src, dst = edge_index[0], edge_index[1]
        h = self.lin(x).view(n, self.heads, self.cout)
        alpha = (h * self.att_src).sum(-1)[src] + (h * self.att_dst).sum(-1)[dst]
        alpha = F.leaky_relu(alpha, 0.2)
        index = dst.unsqueeze(-1).expand_as(alpha)
        amax = torch.full((n, self.heads), -1e9).scatter_reduce(
            0, index, alpha, reduce="amax", include_self=True
        )
        e = (alpha - amax[dst]).exp()
        denom = torch.zeros(n, self.heads).scatter_add(0, index, e)
        weight = e / (denom[dst] + 1e-16)
        msg = h[src] * weight.unsqueeze(-1)
        out = torch.zeros(n, self.heads, self.cout).index_add(0, dst, msg)
        return out.mean(1)


class GNN(nn.Module):
    """Three GCN layers, a GAT layer, a mean readout and a classifier."""

    def __init__(self, cin: int = 32, hidden: int = 64, classes: int = 8) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            [_GCNConv(cin, hidden), _GCNConv(hidden, hidden), _GCNConv(hidden, hidden)]
        )
        self.gat = _GATConv(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        x = F.elu(self.gat(x, edge_index))
        return self.head(torch.cat([x, x.mean(0, keepdim=True).expand_as(x)], 0))


def _gnn() -> Case:
    torch.manual_seed(0)
    nodes, edges = Dim("nodes", min=2, max=100000), Dim("edges", min=2, max=1000000)
    edge_index = torch.randint(0, 50, (2, 200))
    return GNN(), ((torch.randn(50, 32), edge_index), {}), ({0: nodes}, {1: edges})


#: ``family/name`` -> a builder of ``(model, inputs, dynamic_shapes)``.
FAMILIES: dict[str, Callable[[], Case]] = {
    "diffusion/unet2d_cond": _unet,
    "diffusion/vae_decoder": _vae,
    "sam/vit_encoder": _sam,
    "audio/whisper_encoder": _whisper_encoder,
    "audio/whisper_decoder": _whisper_decoder,
    "audio/whisper_decoder_no_sdpa": _whisper_decoder_no_sdpa,
    "medical/unet3d": _unet3d,
    "detection/yolo": _yolo,
    "graph/gnn": _gnn,
}


def build(name: str) -> Case:
    """The stand-in ``name`` in eval mode with seeded weights (BatchNorm statistics too)."""
    torch.manual_seed(0)
    model, inputs, shapes = FAMILIES[name]()
    model = model.eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    return model, inputs, shapes
