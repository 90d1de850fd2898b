# One rank of the installed deep_ep's own EPv2 ElasticBuffer dispatch/combine
# round trip (DeepEP main, deep_ep/buffers/elastic.py; usage as in
# tests/elastic/test_ep.py), checked exactly. Started by `deepep-forge probe
# --run --deep-ep` for an EPv2 deep_ep, one process per GPU, with RANK,
# LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and PROBE_TOKENS,
# PROBE_HIDDEN, PROBE_TOPK set. Rank 0 prints one JSON line.
import json
import os
import sys
import time
import traceback


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
    buf = deep_ep.ElasticBuffer(
        dist.group.WORLD,
        num_max_tokens_per_rank=tokens,
        hidden=hidden_dim,
        num_topk=topk,
        explicitly_destroy=True,
    )
    t = torch.arange(tokens, device="cuda")
    h = torch.arange(hidden_dim, device="cuda")
    # Signed powers of two: x * (ranks <= world) stays exact in bf16.
    exp = ((rank + t[:, None] * 3 + h[None, :]) % 7 - 3).to(torch.float32)
    sign = torch.where((t[:, None] + h[None, :]) % 2 == 0, 1.0, -1.0)
    x = (sign * torch.exp2(exp)).to(torch.bfloat16)
    base = (t * 7 + rank * 3) % experts
    topk_idx = ((base[:, None] + torch.arange(topk, device="cuda")[None, :] * world) % experts).to(deep_ep.topk_idx_t)
    topk_weights = torch.ones(tokens, topk, device="cuda", dtype=torch.float32)
    # Non-expand combine reduces one row per destination rank: x times the distinct ranks a token went to.
    dest = (topk_idx.long() // experts_per_rank)
    copies = torch.zeros(tokens, world, device="cuda").scatter_(1, dest, 1.0).sum(dim=1)

    def roundtrip():
        recv_x, _, _, handle, _ = buf.dispatch(
            x, topk_idx=topk_idx, topk_weights=topk_weights, num_experts=experts, num_max_tokens_per_rank=tokens
        )
        combined, _, _ = buf.combine(recv_x, handle)
        return int(handle.psum_num_recv_tokens_per_scaleup_rank[-1].item()), combined

    n, combined = roundtrip()
    torch.cuda.synchronize()
    want = x.float() * copies[:, None]
    wrong = torch.tensor([int((combined[:tokens].float() != want).sum().item())], device="cuda")
    dist.all_reduce(wrong)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(5):
        roundtrip()
    torch.cuda.synchronize()
    per_roundtrip_ms = (time.perf_counter() - start) * 1e3 / 5
    if rank == 0:
        nccl = torch.cuda.nccl.version()
        print(json.dumps({
            "ok": int(wrong.item()) == 0,
            "api": "ElasticBuffer",
            "mismatches": int(wrong.item()),
            "ranks": world,
            "logical_domain": list(buf.get_logical_domain_size()),
            "received_rows_rank0": n,
            "roundtrip_ms": per_roundtrip_ms,
            "nccl_runtime": ".".join(str(p) for p in nccl) if isinstance(nccl, tuple) else str(nccl),
            "deep_ep": getattr(deep_ep, "__file__", None),
        }), flush=True)
    dist.barrier()
    buf.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # report, then fail the rank
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}), flush=True)
        sys.exit(1)
