# One rank of the installed deep_ep's own dispatch/combine round trip, checked
# exactly. Started by `deepep-forge probe --run --deep-ep`, one process per
# GPU, with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
# PROBE_TOKENS, PROBE_HIDDEN, PROBE_TOPK set. Rank 0 prints one JSON line.
# HybridEP's `HybridEPBuffer`, or, for a deep_ep with `ElasticBuffer` (DeepEP
# main, EPv2: deep_ep/buffers/elastic.py, used as in tests/elastic/test_ep.py),
# EPv2's `ElasticBuffer`.
import json
import os
import sys
import time
import traceback


def nccl_version(torch):
    """The NCCL torch was compiled against, as `2.28.9` (torch.cuda.nccl.version() is
    the header's version, not the library's)."""
    try:
        v = torch.cuda.nccl.version()
        return ".".join(str(p) for p in v) if isinstance(v, tuple) else str(v)
    except Exception:
        return None


def nccl_runtime():
    """The NCCL this process loaded, by its own `ncclGetVersion` (`2.30.7`), and its path."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({l.split()[-1] for l in f if "/libnccl.so" in l})
        if not paths:
            return None, None
        code = ctypes.c_int()
        if ctypes.CDLL(paths[0]).ncclGetVersion(ctypes.byref(code)) != 0:
            return None, paths[0]
        c = code.value
        major, minor, patch = (c // 10000, c // 100 % 100, c % 100) if c >= 20900 else (c // 1000, c // 100 % 10, c % 100)
        return f"{major}.{minor}.{patch}", paths[0]
    except Exception:
        return None, None


def loaded(prefix):
    """The file name of the first shared library starting with `prefix` this process has mapped."""
    try:
        with open("/proc/self/maps") as f:
            names = sorted({l.split()[-1].rsplit("/", 1)[-1] for l in f if "/" + prefix in l})
        return names[0] if names else None
    except OSError:
        return None


def hybrid_ep(deep_ep, torch, dist, world, tokens, hidden_dim, topk, experts, hidden, topk_idx, topk_weights):
    buf = deep_ep.HybridEPBuffer(
        group=dist.group.WORLD,
        hidden_dim=hidden_dim,
        max_num_of_tokens_per_rank=tokens,
        num_local_experts=topk,
        use_fp8=False,
    )

    def roundtrip():
        out, probs, _, handle = buf.dispatch(
            hidden=hidden, scaling_factor=None, topk_idx=topk_idx, topk_weights=topk_weights, num_of_experts=experts
        )
        n = int(handle[3].item())
        copies = handle[4][:n].sum(dim=1)
        combined, _ = buf.combine(out.to(torch.bfloat16) * copies.unsqueeze(1), probs, handle)
        return n, combined

    # combine(dispatch(x) * copies) == x * topk
    info = {"ranks_per_domain": getattr(buf, "num_of_hybrid_ep_ranks_per_nvlink_domain", None)}
    return roundtrip, hidden.float() * topk, info, lambda: None


def elastic(deep_ep, torch, dist, world, tokens, hidden_dim, topk, experts, hidden, topk_idx, topk_weights):
    buf = deep_ep.ElasticBuffer(
        dist.group.WORLD, num_max_tokens_per_rank=tokens, hidden=hidden_dim, num_topk=topk, explicitly_destroy=True
    )
    topk_idx = topk_idx.to(deep_ep.topk_idx_t)

    def roundtrip():
        recv_x, _, _, handle, _ = buf.dispatch(
            hidden, topk_idx=topk_idx, topk_weights=topk_weights, num_experts=experts, num_max_tokens_per_rank=tokens
        )
        combined, _, _ = buf.combine(recv_x, handle)
        return int(handle.psum_num_recv_tokens_per_scaleup_rank[-1].item()), combined[:tokens]

    # A non-expand combine reduces one row per destination rank: x times the distinct ranks reached.
    ranks = torch.zeros(tokens, world, device="cuda").scatter_(1, topk_idx.long() // topk, 1.0).sum(dim=1)
    info = {
        "api": "ElasticBuffer",
        "logical_domain": list(buf.get_logical_domain_size()),
    }
    return roundtrip, hidden.float() * ranks[:, None], info, buf.destroy


def main():
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    tokens = int(os.environ["PROBE_TOKENS"])
    hidden_dim = int(os.environ["PROBE_HIDDEN"])
    topk = int(os.environ["PROBE_TOPK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", local))
    import deep_ep

    experts = world * topk  # topk experts per rank
    t = torch.arange(tokens, device="cuda")
    h = torch.arange(hidden_dim, device="cuda")
    # Signed powers of two: x * (copies <= topk or ranks <= world) stays exact in bf16.
    exp = ((rank + t[:, None] * 3 + h[None, :]) % 7 - 3).to(torch.float32)
    sign = torch.where((t[:, None] + h[None, :]) % 2 == 0, 1.0, -1.0)
    hidden = (sign * torch.exp2(exp)).to(torch.bfloat16)
    base = (t * 7 + rank * 3) % experts
    topk_idx = (base[:, None] + torch.arange(topk, device="cuda")[None, :] * world) % experts
    topk_weights = torch.ones(tokens, topk, device="cuda", dtype=torch.float32)
    make = elastic if hasattr(deep_ep, "ElasticBuffer") else hybrid_ep
    roundtrip, want, info, destroy = make(
        deep_ep, torch, dist, world, tokens, hidden_dim, topk, experts, hidden, topk_idx, topk_weights
    )

    n, combined = roundtrip()
    wrong = torch.tensor([int((combined.float() != want).sum().item())], device="cuda")
    dist.all_reduce(wrong)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(5):
        roundtrip()
    torch.cuda.synchronize()
    per_roundtrip_ms = (time.perf_counter() - start) * 1e3 / 5
    if rank == 0:
        runtime = nccl_runtime()
        print(json.dumps({
            "ok": int(wrong.item()) == 0,
            "mismatches": int(wrong.item()),
            "ranks": world,
            "dispatched_rows_rank0": n,
            "roundtrip_ms": per_roundtrip_ms,
            "deep_ep": getattr(deep_ep, "__file__", None),
            "nccl_torch_built": nccl_version(torch),
            "nccl_runtime": runtime[0],
            "nccl_library": runtime[1] or loaded("libnccl"),
            "nvshmem": loaded("libnvshmem"),
            **info,
        }), flush=True)
    dist.barrier()
    destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # report, then fail the rank
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}), flush=True)
        sys.exit(1)
