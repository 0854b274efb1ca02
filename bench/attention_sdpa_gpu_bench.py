#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on attention_gpu_bench's problems, the KV gathered dense.

The baseline a user would pick instead of kvmesh's paged kernels: the same paged pool (shuffled block
ids), gathered into dense K/V once (not timed; the gather is timed separately, for context), then
torch.nn.functional.scaled_dot_product_attention timed with CUDA events (2 warm-ups, the median of 9,
as attention_gpu_bench does):

  decode: 64 sequences x 4096 tokens, 8 KV heads, 32 query heads (GQA 4), head_dim 128, BF16, one
          query token;
  MLA:    64 sequences x 8192 tokens, 16 heads, one latent head of 576 (K) / 512 (V), BF16.

With --kvmesh-log (attention_gpu_bench's output from the same run) it prints, beside its own table,
  RATIO decode_bf16_vs_torch_sdpa_time <kvmesh / sdpa> torch_sdpa_dense goal<=1.00
  RATIO mla_decode_vs_torch_sdpa_time <kvmesh / sdpa> torch_sdpa_dense goal<=1.00
(kvmesh reading the paged pool should take no longer than SDPA on the dense copy). Without torch or
a CUDA device it prints why and exits 0; scripts/gpu-check runs it on the device machine.
"""
import argparse
import re
import sys

HBM_PEAK = 4.8e12  # H200, bytes per second


def median_ms(torch, fn, runs=9):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(runs):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def gathered(torch, seqs, tokens, heads, dim, tpb, kv, generator):
    """A shuffled paged pool [blocks, kv, heads, tpb, dim] (HND) and its dense gather."""
    blocks = seqs * tokens // tpb
    pool = torch.randn(blocks, kv, heads, tpb, dim, device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(blocks, generator=generator).view(seqs, tokens // tpb).cuda()

    def gather():
        g = pool[table]  # [seqs, blocks/seq, kv, heads, tpb, dim]
        return g.permute(2, 0, 3, 1, 4, 5).reshape(kv, seqs, heads, tokens, dim)

    return gather


def sdpa(torch, q, k, v, gqa):
    f = torch.nn.functional.scaled_dot_product_attention
    if gqa:
        return lambda: f(q, k, v, enable_gqa=True)
    return lambda: f(q, k, v)


def run_one(torch, name, q, k, v, gqa, bytes_read):
    fn = sdpa(torch, q, k, v, gqa)
    try:
        fn()
    except (TypeError, RuntimeError) as e:  # older torch, or no backend for GQA: say so
        if not gqa:
            raise
        print(f"{name}: sdpa with enable_gqa failed ({e}); expanding the KV heads instead")
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        fn = sdpa(torch, q, k, v, False)
    ms = median_ms(torch, fn)
    print(f"{name:<34} {ms:8.3f} ms  {bytes_read / 2**30:7.3f} GiB  "
          f"{bytes_read / (ms * 1e-3) * 1e-12:6.3f} TB/s  {bytes_read / (ms * 1e-3) / HBM_PEAK:5.3f} "
          "of HBM peak")
    return ms


def kvmesh_ms(log, pattern):
    if not log:
        return None
    for line in open(log, encoding="utf-8", errors="replace"):
        m = re.match(pattern, line)
        if m:
            return float(m.group(1))
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvmesh-log", help="attention_gpu_bench output of the same run")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("attention_sdpa_gpu_bench: no torch: skipped")
        return 0
    if not torch.cuda.is_available():
        print("attention_sdpa_gpu_bench: no CUDA device: skipped")
        return 0
    print(f"attention_sdpa_gpu_bench on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    g = torch.Generator().manual_seed(7)

    # Decode (Llama-3-8B-like layer).
    seqs, tokens, kv_heads, q_heads, dim, tpb = 64, 4096, 8, 32, 128, 64
    gather = gathered(torch, seqs, tokens, kv_heads, dim, tpb, 2, g)
    gather_ms = median_ms(torch, gather)
    kv = gather()
    k, v = kv[0].contiguous(), kv[1].contiguous()  # [seqs, heads, tokens, dim]
    del kv
    q = torch.randn(seqs, q_heads, 1, dim, device="cuda", dtype=torch.bfloat16)
    decode_bytes = 2 * seqs * kv_heads * tokens * dim * 2
    print(f"{'gather of the paged K/V (context)':<34} {gather_ms:8.3f} ms")
    decode_ms = run_one(torch, "torch sdpa decode bf16 (dense)", q, k, v, True, decode_bytes)
    del k, v, q

    # MLA (DeepSeek-like latent pool, 16 heads): K = the 576-wide record, V = its first 512.
    seqs, tokens, heads, tpb = 64, 8192, 16, 64
    gather = gathered(torch, seqs, tokens, 1, 576, tpb, 1, g)
    latent = gather()[0].contiguous()  # [seqs, 1, tokens, 576]
    q = torch.randn(seqs, heads, 1, 576, device="cuda", dtype=torch.bfloat16)
    mla_bytes = seqs * tokens * 576 * 2
    mla_ms = None
    try:
        mla_ms = run_one(torch, "torch sdpa mla bf16 (dense)", q, latent, latent[..., :512], True,
                         mla_bytes)
    except Exception as e:  # noqa: BLE001
        print(f"torch sdpa mla: not run: {e}")

    kv_decode = kvmesh_ms(args.kvmesh_log, r"^decode bf16\s+HND\s+splits\s+\d+\s+([0-9.]+) ms")
    kv_mla = kvmesh_ms(args.kvmesh_log, r"^mla decode bf16 16 heads\s+HND\s+splits\s+\d+\s+([0-9.]+) ms")
    if kv_decode is not None:
        print(f"RATIO decode_bf16_vs_torch_sdpa_time {kv_decode / decode_ms:.3f} torch_sdpa_dense "
              "goal<=1.00")
    elif args.kvmesh_log:
        print("attention_sdpa_gpu_bench: no kvmesh decode bf16 time in the log: no ratio")
    if kv_mla is not None and mla_ms is not None:
        print(f"RATIO mla_decode_vs_torch_sdpa_time {kv_mla / mla_ms:.3f} torch_sdpa_dense "
              "goal<=1.00")
    return 0


if __name__ == "__main__":
    sys.exit(main())
