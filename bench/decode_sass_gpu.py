#!/usr/bin/env python3
"""Instruction counts of the decode-attention inner loop, read off the sm_90 SASS (no device needed).

  cuobjdump --dump-sass build/.../kernels/CMakeFiles/kvmesh_kernels.dir/cuda/decode_attention.cu.o \\
      > decode.sass
  bench/decode_sass_gpu.py decode.sass

For every DecodeAttentionKernel<head_dim, codec, rows> it finds the token-pass loop of ComputeTile
(the innermost loop that holds the butterfly shuffles of the dot products) and the tile loop around
it, counts their instructions by kind, and prints them per pass, per key (a pass handles
32 / (head_dim / elements per lane) keys of one warp; the rest of the tile loop — issuing the
cp.async copies of the next tile, the barrier — once per kTile keys) and per byte of K+V read (with
the side-pool scales), and the bandwidth at which the 4 schedulers of 132 SMs would issue them
(docs/kernels-perf.md compares it with HBM's 4.8 TB/s and the goals). "common" leaves out the regions a forward branch skips that hold
the lazy rescale (MUFU.EX2 and at least 8 FMUL, no shuffle): taken only when a row's running max
grows by more than 2^8. Static counts: every instruction of the region once, predicated or not.
"""
import re
import sys

SMS, SCHEDULERS, CLOCK = 132, 4, 1.98e9  # H200 SXM: boost clock
HBM = 4.8e12
ISSUE = SMS * SCHEDULERS * CLOCK  # warp-instructions per second
CODEC = {0: ("16-bit", 16), 1: ("8-bit", 8), 2: ("nvfp4", 4)}
KINDS = [("FFMA", r"^FFMA"), ("FMUL/FADD", r"^(FMUL|FADD|FMNMX)"), ("SHFL", r"^SHFL"),
         ("MUFU", r"^MUFU"), ("convert", r"^(F2FP|HADD2\.F32|F2F|I2F|HADD2|HMUL2|HFMA2)"),
         ("PRMT", r"^PRMT"), ("int/logic", r"^(LOP3|SHF|IMAD|IADD3|LEA|SEL|MOV|IABS|VIADD|ISCADD)"),
         ("LDS", r"^LDS"), ("compare", r"^(ISETP|FSETP|PLOP3|FSEL|CSEL|P2R|R2P)"),
         ("branch", r"^(BRA|BSSY|BSYNC|WARPSYNC|EXIT)")]


def parse(path):
    funcs = {}
    name = None
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            funcs[name] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and name:
            ins = m.group(2)
            pred = None
            pm = re.match(r"(@!?U?P\w+)\s+(.*)", ins)
            if pm:
                pred, ins = pm.group(1), pm.group(2)
            funcs[name].append((int(m.group(1), 16), ins, pred))
    return funcs


def loops(code):
    out = []
    for addr, ins, _ in code:
        m = re.match(r"BRA(?:\.\w+)*\s+0x([0-9a-f]+)", ins)
        if m and int(m.group(1), 16) <= addr:
            out.append((int(m.group(1), 16), addr))
    return out


def kind(ins):
    op = ins.split()[0]
    for k, pattern in KINDS:
        if re.match(pattern, op):
            return k
    return "other"


def analyse(code):
    shfl = [a for a, ins, _ in code if ins.startswith("SHFL.BFLY")]
    cands = [(b, e) for b, e in loops(code) if any(b <= a <= e for a in shfl)]
    if not cands:
        return None
    b, e = min(cands, key=lambda x: x[1] - x[0])
    outer = [(ob, oe) for ob, oe in loops(code) if ob <= b and e <= oe and (ob, oe) != (b, e)]
    tile_rest, nested = 0, []
    if outer:
        ob, oe = min(outer, key=lambda x: x[1] - x[0])
        tile_rest = sum(1 for a, _, _ in code if ob <= a <= oe and not b <= a <= e)
        # Loops inside the tile loop besides the pass loop (a copy loop the compiler kept): their
        # bodies run more than once per tile; (body size, cp.async per trip).
        for nb, ne in loops(code):
            if ob < nb and ne < oe and not (nb <= b and e <= ne) and not (b <= nb and ne <= e):
                body = [i for a, i, _ in code if nb <= a <= ne]
                nested.append((len(body), sum(i.startswith("LDGSTS") for i in body)))
    body = [(a, i, p) for a, i, p in code if b <= a <= e]
    rare = set()
    for a, ins, p in body:
        m = re.match(r"BRA(?:\.\w+)*\s+0x([0-9a-f]+)", ins)
        if not (m and p):
            continue
        t = int(m.group(1), 16)
        if not (a < t <= e):
            continue
        region = [(x, i) for x, i, _ in body if a < x < t]
        ops = [i.split()[0] for _, i in region]
        if any(o.startswith("MUFU.EX2") for o in ops) and sum(o.startswith("FMUL") for o in ops) >= 8 \
                and not any(o.startswith("SHFL") for o in ops):
            rare.update(x for x, _ in region)
    counts, common = {}, {}
    for a, ins, _ in body:
        k = kind(ins)
        counts[k] = counts.get(k, 0) + 1
        if a not in rare:
            common[k] = common.get(k, 0) + 1
    return counts, common, tile_rest, nested


ELEMS8 = False  # --elems8: the first version (8 dims per lane for every codec)


def main():
    global ELEMS8
    ELEMS8 = "--elems8" in sys.argv
    funcs = parse([a for a in sys.argv[1:] if not a.startswith("--")][0])
    rows = []
    for name, code in funcs.items():
        m = re.search(r"DecodeAttentionKernelILi(\d+)E\w*?CodecE(\d)ELi(\d)E", name)
        if not m:
            continue
        d, c, r = int(m.group(1)), int(m.group(2)), int(m.group(3))
        res = analyse(code)
        if res is None:
            print(f"d{d} {CODEC[c][0]} rows {r}: no shuffle loop found")
            continue
        counts, common, tile_rest, nested = res
        rows.append((d, c, r, counts, common, tile_rest, nested))
    print(f"issue rate {ISSUE:.3e} warp-instr/s (132 SMs x 4 schedulers x 1.98 GHz); HBM 4.8 TB/s")
    print(f"{'kernel':<20}{'pass':>6}{'common':>7}{'keys':>5}{'/key':>7}{'tile':>6}{'kTile':>6}"
          f"{'total/key':>10}{'B/key':>7}{'instr/B':>8}{'issue TB/s':>11}  kinds (common path, per pass)")
    for d, c, r, counts, common, tile_rest, nested in sorted(rows):
        bits = CODEC[c][1]
        elems = 16 if c != 0 and r == 4 and not ELEMS8 else 8  # Shape::kElems
        keys = 32 // (d // elems)
        row_bytes = d * bits // 8
        k_tile = max(16, min(64, 16384 // (2 * row_bytes)))
        copies = 2 * k_tile * (row_bytes // 16) // 128  # 16-byte cp.async per thread per tile
        for size, per_trip in nested:
            if per_trip:
                tile_rest += (copies // per_trip - 1) * size
        scale = 8 if c == 1 else (2 * d // 16 if c == 2 else 0)  # K and V side-pool bytes per key
        bytes_key = 2 * row_bytes + scale
        total = sum(common.values())
        per_key = total / keys + tile_rest / k_tile
        tbps = ISSUE / per_key * bytes_key / 1e12
        kinds = " ".join(f"{k}={common[k]}" for k, _ in KINDS + [("other", "")] if common.get(k))
        print(f"d{d} {CODEC[c][0]:<6} rows {r}{sum(counts.values()):>6}{total:>7}{keys:>5}"
              f"{total / keys:>7.1f}{tile_rest:>6}{k_tile:>6}{per_key:>10.1f}{bytes_key:>7}"
              f"{per_key / bytes_key:>8.3f}{tbps:>11.2f}  {kinds}")


if __name__ == "__main__":
    main()
