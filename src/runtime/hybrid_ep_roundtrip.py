# One rank of the installed deep_ep's own HybridEP dispatch/combine round
# trip, checked exactly. Started by `deepep-forge probe --run --deep-ep`, one
# process per GPU, with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
# and PROBE_TOKENS, PROBE_HIDDEN, PROBE_TOPK set. Rank 0 prints one JSON line.
import json
import os
import sys
import time
import traceback


def loaded(prefix):
    """The file name of the first shared library starting with `prefix` this process has mapped."""
    try:
        with open("/proc/self/maps") as f:
            names = sorted({l.split()[-1].rsplit("/", 1)[-1] for l in f if "/" + prefix in l})
        return names[0] if names else None
    except OSError:
        return None


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

    experts_per_rank = topk
    experts = world * experts_per_rank
    buf = deep_ep.HybridEPBuffer(
        group=dist.group.WORLD,
        hidden_dim=hidden_dim,
        max_num_of_tokens_per_rank=tokens,
        num_local_experts=experts_per_rank,
        use_fp8=False,
    )
    t = torch.arange(tokens, device="cuda")
    h = torch.arange(hidden_dim, device="cuda")
    # Signed powers of two: x * (copies <= topk) stays exact in bf16.
    exp = ((rank + t[:, None] * 3 + h[None, :]) % 7 - 3).to(torch.float32)
    sign = torch.where((t[:, None] + h[None, :]) % 2 == 0, 1.0, -1.0)
    hidden = (sign * torch.exp2(exp)).to(torch.bfloat16)
    base = (t * 7 + rank * 3) % experts
    topk_idx = (base[:, None] + torch.arange(topk, device="cuda")[None, :] * world) % experts
    topk_weights = torch.ones(tokens, topk, device="cuda", dtype=torch.float32)

    def roundtrip():
        out, probs, _, handle = buf.dispatch(
            hidden=hidden, scaling_factor=None, topk_idx=topk_idx, topk_weights=topk_weights, num_of_experts=experts
        )
        n = int(handle[3].item())
        copies = handle[4][:n].sum(dim=1)
        combined, _ = buf.combine(out.to(torch.bfloat16) * copies.unsqueeze(1), probs, handle)
        return n, combined

    n, combined = roundtrip()
    wrong = torch.tensor([int((combined.float() != hidden.float() * topk).sum().item())], device="cuda")
    dist.all_reduce(wrong)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(5):
        roundtrip()
    torch.cuda.synchronize()
    per_roundtrip_ms = (time.perf_counter() - start) * 1e3 / 5
    if rank == 0:
        print(json.dumps({
            "ok": int(wrong.item()) == 0,
            "mismatches": int(wrong.item()),
            "ranks": world,
            "ranks_per_domain": getattr(buf, "num_of_hybrid_ep_ranks_per_nvlink_domain", None),
            "dispatched_rows_rank0": n,
            "roundtrip_ms": per_roundtrip_ms,
            "deep_ep": getattr(deep_ep, "__file__", None),
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else None,
            "nccl_library": loaded("libnccl"),
            "nvshmem": loaded("libnvshmem"),
        }), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # report, then fail the rank
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}), flush=True)
        sys.exit(1)
