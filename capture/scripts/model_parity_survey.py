"""numprobe against msprobe on many `transformers` model families: which dumps differ, and where.

Each family is built from a small config (random init: nothing is downloaded) and trained one
AdamW step under each tool's PrecisionDebugger, every tool and configuration in a process of
its own (step i of a dump is family i). The dumps are then compared family by family: the
entries and their order, the keys and non-statistic values of each entry, the statistics, md5
(judged against the CRC-32 of the tensor run's files, since msprobe 26.2 hashes tensors on a
thread while in-place APIs change them), construct.json and stack.json (their key order too).
The CI suite (capture/python_tests/test_hf_models.py) holds four families; this survey looks
wider, for what the next model may break.

  python capture/scripts/model_parity_survey.py --out /tmp/survey \\
      [--families t5,bart,bloom,llama_ckpt_nr,...] [--configs stat_L1,stat_mix,stat_L0,md5_mix]

`--families all` takes every family below; a name ending in `_bf16` runs the family in
bfloat16. Needs torch, transformers and msprobe (mindstudio-probe) in the interpreter.
"""
import argparse
import concurrent.futures
import glob
import json
import math
import os
import subprocess
import sys
import zlib

H, B, S = 64, 2, 8
CONFIGS = {  # name -> (task, level, summary_mode)
    "stat_L1": ("statistics", "L1", "statistics"),
    "stat_mix": ("statistics", "mix", "statistics"),
    "stat_L0": ("statistics", "L0", "statistics"),
    "md5_mix": ("statistics", "mix", "md5"),
    "tensor_mix": ("tensor", "mix", None),
}


def _causal_lm(tf, config_cls, model_cls, **kw):
    def build(ids):
        return model_cls(config_cls(vocab_size=128, **kw)), {"input_ids": ids, "labels": ids}
    return build


def families():
    """name -> build(ids) returning (model, keyword inputs with labels)."""
    import torch
    import transformers as tf

    lm = dict(hidden_size=H, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64)
    img = lambda n: torch.randn(B, 3, n, n)  # noqa: E731
    cls = torch.arange(B) % 2

    def llama_ckpt(reentrant):
        def build(ids):
            cfg = tf.LlamaConfig(vocab_size=128, intermediate_size=2 * H, num_key_value_heads=2,
                                 **lm)
            m = tf.LlamaForCausalLM(cfg)
            m.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": reentrant})
            return m, {"input_ids": ids, "labels": ids}
        return build

    return {
        "llama": _causal_lm(tf, tf.LlamaConfig, tf.LlamaForCausalLM, intermediate_size=2 * H,
                            num_key_value_heads=2, **lm),
        "llama_ckpt": llama_ckpt(True),
        "llama_ckpt_nr": llama_ckpt(False),
        "gemma": _causal_lm(tf, tf.GemmaConfig, tf.GemmaForCausalLM, intermediate_size=2 * H,
                            num_key_value_heads=1, head_dim=16, **lm),
        "phi": _causal_lm(tf, tf.PhiConfig, tf.PhiForCausalLM, intermediate_size=2 * H,
                          partial_rotary_factor=0.5, **lm),
        "gptneox": _causal_lm(tf, tf.GPTNeoXConfig, tf.GPTNeoXForCausalLM,
                              intermediate_size=2 * H, rotary_pct=0.5, **lm),
        "opt": _causal_lm(tf, tf.OPTConfig, tf.OPTForCausalLM, ffn_dim=2 * H, dropout=0.0,
                          word_embed_proj_dim=H, **lm),
        "bloom": _causal_lm(tf, tf.BloomConfig, tf.BloomForCausalLM, hidden_size=H, n_layer=2,
                            n_head=4),
        "falcon": _causal_lm(tf, tf.FalconConfig, tf.FalconForCausalLM, alibi=False,
                             new_decoder_architecture=True, num_kv_heads=2,
                             hidden_size=H, num_hidden_layers=2, num_attention_heads=4),
        "mixtral": _causal_lm(tf, tf.MixtralConfig, tf.MixtralForCausalLM,
                              intermediate_size=2 * H, num_key_value_heads=2,
                              num_local_experts=4, num_experts_per_tok=2,
                              output_router_logits=True, **lm),
        "qwen2moe": _causal_lm(tf, tf.Qwen2MoeConfig, tf.Qwen2MoeForCausalLM,
                               intermediate_size=2 * H, moe_intermediate_size=H,
                               shared_expert_intermediate_size=H, num_key_value_heads=2,
                               num_experts=4, num_experts_per_tok=2,
                               output_router_logits=True, **lm),
        "t5": lambda ids: (tf.T5ForConditionalGeneration(tf.T5Config(
            vocab_size=128, d_model=H, d_kv=16, d_ff=2 * H, num_layers=2, num_decoder_layers=2,
            num_heads=4, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)),
            {"input_ids": ids, "labels": ids}),
        "bart": lambda ids: (tf.BartForConditionalGeneration(tf.BartConfig(
            vocab_size=128, d_model=H, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=2 * H,
            decoder_ffn_dim=2 * H, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
            max_position_embeddings=64)), {"input_ids": ids, "labels": ids}),
        "whisper": lambda ids: (tf.WhisperForConditionalGeneration(tf.WhisperConfig(
            vocab_size=128, num_mel_bins=16, d_model=H, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=2 * H,
            decoder_ffn_dim=2 * H, max_source_positions=16, max_target_positions=32,
            dropout=0.0, decoder_start_token_id=1, pad_token_id=0)),
            {"input_features": torch.randn(B, 16, 32), "labels": ids}),
        "albert": lambda ids: (tf.AlbertForSequenceClassification(tf.AlbertConfig(
            vocab_size=128, embedding_size=32, intermediate_size=2 * H, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, num_labels=2, **{**lm, "num_hidden_layers": 3})),
            {"input_ids": ids, "labels": cls}),
        "deberta": lambda ids: (tf.DebertaV2ForSequenceClassification(tf.DebertaV2Config(
            vocab_size=128, intermediate_size=2 * H, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, relative_attention=True,
            pos_att_type=["p2c", "c2p"], num_labels=2, **lm)), {"input_ids": ids, "labels": cls}),
        "electra": lambda ids: (tf.ElectraForPreTraining(tf.ElectraConfig(
            vocab_size=128, embedding_size=32, intermediate_size=2 * H, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, **lm)), {"input_ids": ids, "labels": ids % 2}),
        "fnet": lambda ids: (tf.FNetForSequenceClassification(tf.FNetConfig(
            vocab_size=128, hidden_size=H, num_hidden_layers=2, intermediate_size=2 * H,
            max_position_embeddings=64, hidden_dropout_prob=0.0, num_labels=2,
            use_tpu_fourier_optimizations=False)), {"input_ids": ids, "labels": cls}),
        "resnet": lambda ids: (tf.ResNetForImageClassification(tf.ResNetConfig(
            num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
            layer_type="basic", num_labels=3)), {"pixel_values": img(32), "labels": cls}),
        "convnext": lambda ids: (tf.ConvNextForImageClassification(tf.ConvNextConfig(
            num_channels=3, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, num_labels=3,
            drop_path_rate=0.0, image_size=32)), {"pixel_values": img(32), "labels": cls}),
        "swin": lambda ids: (tf.SwinForImageClassification(tf.SwinConfig(
            image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1],
            num_heads=[2, 2], window_size=4, num_labels=3, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, drop_path_rate=0.0)),
            {"pixel_values": img(32), "labels": cls}),
        "clip": lambda ids: (tf.CLIPModel(tf.CLIPConfig(
            text_config=dict(vocab_size=128, intermediate_size=2 * H, **lm),
            vision_config=dict(hidden_size=H, intermediate_size=2 * H, num_hidden_layers=2,
                               num_attention_heads=4, image_size=16, patch_size=4),
            projection_dim=32)), {"input_ids": ids, "pixel_values": img(16), "return_loss": True}),
    }


def build(name):
    import torch
    torch.manual_seed(zlib.crc32(name.encode()) % 1000)
    ids = torch.randint(0, 128, (B, S))
    if name.endswith("_bf16"):
        m, batch = families()[name[:-5]](ids)
        return m.to(torch.bfloat16), {
            k: v.to(torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point() else v
            for k, v in batch.items()}
    return families()[name](ids)


def child(tool, cfg_path, names):
    import torch
    torch.set_num_threads(1)
    runs = [build(n) for n in names]
    if tool == "msprobe":
        from msprobe.pytorch import PrecisionDebugger
    else:
        from numprobe.pytorch import PrecisionDebugger
    dbg = PrecisionDebugger(config_path=cfg_path)
    for model, batch in runs:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model.train()
        dbg.start(model=model)
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
        dbg.stop()
        dbg.step()


def run(out, tool, cname, names):
    task, level, summary = CONFIGS[cname]
    d = os.path.join(out, f"{tool}_{cname}")
    os.makedirs(d, exist_ok=True)
    sec = {"scope": [], "list": [], "data_mode": ["all"]}
    if summary:
        sec.update(tensor_list=[], summary_mode=summary)
    cfg = {"task": task, "dump_path": os.path.join(d, "dump"), "level": level, "rank": [],
           "step": [], "async_dump": False, "extra_info": True, task: sec}
    path = os.path.join(d, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    r = subprocess.run([sys.executable, __file__, "--child", tool, path, ",".join(names)],
                       cwd=d, capture_output=True, text=True)
    return (tool, cname), None if r.returncode == 0 else r.stderr[-2000:]


def load(root, step, name="dump.json"):
    (d,) = glob.glob(os.path.join(root, f"step{step}", "*"))
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


STATS = ("Max", "Min", "Mean", "Norm", "md5")


def shape(v):
    """`v` without its statistics (keys, types, shapes, non-tensor values)."""
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items() if k not in STATS}
    if isinstance(v, list):
        return [shape(x) for x in v]
    return v


def stat_diffs(a, b, path, out):
    if isinstance(b, dict):
        for k, v in b.items():
            if k in STATS and k != "md5":
                x = a.get(k) if isinstance(a, dict) else None
                same = x == v or (isinstance(x, float) and isinstance(v, float)
                                  and math.isnan(x) and math.isnan(v))
                if not same:
                    out.append(f"{path}.{k}: {x} vs {v}")
            elif isinstance(a, dict) and k in a:
                stat_diffs(a[k], v, f"{path}.{k}", out)
    elif isinstance(b, list) and isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            stat_diffs(x, y, f"{path}[{i}]", out)


def crc_pairs(md5_body, tensor_body, tensor_dir, path, out):
    """(path, recorded md5, CRC-32 of the tensor run's file at the same place)."""
    import torch
    if isinstance(md5_body, dict) and "md5" in md5_body:
        if isinstance(tensor_body, dict) and tensor_body.get("data_name"):
            t = torch.load(os.path.join(tensor_dir, tensor_body["data_name"]), weights_only=True)
            # The raw bytes in the tensor's own dtype (bfloat16 as its 16-bit words).
            raw = t.contiguous().view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8)
            out.append((path, md5_body["md5"], f"{zlib.crc32(raw.numpy().tobytes()):08x}"))
    elif isinstance(md5_body, dict) and isinstance(tensor_body, dict):
        for k, v in md5_body.items():
            crc_pairs(v, tensor_body.get(k), tensor_dir, f"{path}.{k}", out)
    elif isinstance(md5_body, list) and isinstance(tensor_body, list):
        for i, (m, t) in enumerate(zip(md5_body, tensor_body)):
            crc_pairs(m, t, tensor_dir, f"{path}[{i}]", out)


def compare(out, cname, step, tensor_root):
    ours = load(os.path.join(out, f"numprobe_{cname}", "dump"), step)["data"]
    theirs = load(os.path.join(out, f"msprobe_{cname}", "dump"), step)["data"]
    found = []
    only_o = [k for k in ours if k not in theirs]
    only_t = [k for k in theirs if k not in ours]
    if only_o or only_t:
        found.append(f"{len(only_o)} entries only numprobe's {only_o[:3]}, {len(only_t)} only "
                     f"msprobe's {only_t[:3]}")
    common_o = [k for k in ours if k in theirs]
    common_t = [k for k in theirs if k in ours]
    if common_o != common_t:
        i = next(i for i, (x, y) in enumerate(zip(common_o, common_t)) if x != y)
        found.append(f"order differs at {common_o[i]} / {common_t[i]}")
    keys = [k for k in common_t if json.dumps(shape(ours[k])) != json.dumps(shape(theirs[k]))]
    if keys:
        found.append(f"{len(keys)} entries differ in keys or values, first {keys[:3]}")
    diffs = []
    for k in common_t:
        stat_diffs(ours[k], theirs[k], k, diffs)
    if diffs:
        found.append(f"{len(diffs)} statistics differ, first {diffs[:3]}")
    if cname.startswith("md5") and tensor_root:
        tensors = load(tensor_root, step)["data"]
        (rank_dir,) = glob.glob(os.path.join(tensor_root, f"step{step}", "*"))
        pairs = []
        for k, body in ours.items():
            crc_pairs(body, tensors.get(k), os.path.join(rank_dir, "dump_tensor_data"), k, pairs)
        wrong = [p for p, got, want in pairs if got != want]
        if wrong:
            found.append(f"{len(wrong)} of numprobe's md5 are not the tensors' CRC-32: {wrong[:3]}")
    for name in ("construct.json", "stack.json"):
        a = load(os.path.join(out, f"numprobe_{cname}", "dump"), step, name)
        b = load(os.path.join(out, f"msprobe_{cname}", "dump"), step, name)
        if a != b:
            differ = sorted(k for k in set(a or {}) | set(b or {})
                            if (a or {}).get(k, "-") != (b or {}).get(k, "-"))
            found.append(f"{name}: {len(differ)} keys differ, first {differ[:3]}")
        elif a and list(a) != list(b):
            i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            found.append(f"{name}: key order differs at {list(a)[i]} / {list(b)[i]}")
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out")
    p.add_argument("--families", default="all")
    p.add_argument("--configs", default="stat_L1,stat_mix,stat_L0")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.child[2].split(","))
        return
    if not a.out:
        p.error("--out is required")
    names = list(families()) if a.families == "all" else a.families.split(",")
    configs = a.configs.split(",")
    if "md5_mix" in configs and "tensor_mix" not in configs:
        configs.append("tensor_mix")  # md5 is judged against the tensors themselves
    a.out = os.path.abspath(a.out)
    jobs = [(tool, c) for c in configs for tool in ("numprobe", "msprobe")]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = dict(pool.map(lambda j: run(a.out, j[0], j[1], names), jobs))
    failed = {k: v for k, v in results.items() if v}
    for (tool, cname), err in failed.items():
        print(f"{tool} {cname} failed:\n{err}")
    tensor_root = os.path.join(a.out, "numprobe_tensor_mix", "dump")
    for cname in configs:
        if any(c == cname for _, c in failed):
            continue
        print(f"== {cname}")
        for step, name in enumerate(names):
            found = compare(a.out, cname, step, tensor_root if cname == "md5_mix" else None)
            print(f"{name}: {'same' if not found else ''}")
            for f in found:
                print(f"    {f}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
