"""One training step of a HuggingFace `transformers` model built from a small config (hidden 64,
2 layers, random init, nothing downloaded) under msprobe's or numprobe's PrecisionDebugger.

usage: python hf_model.py --family llama|bert|gpt2 --tool numprobe|msprobe --task tensor|statistics
                          --dump-path DIR

The config is msprobe's L1 config of the task (all data modes, extra_info); the seed is 1234 for
the weights and the batch, so the same command gives the same dump.
"""
import argparse
import json
import os
import tempfile

VOCAB, HIDDEN, LAYERS, HEADS, FFN, POSITIONS = 128, 64, 2, 4, 128, 32
BATCH, SEQ, SEED = 2, 8, 1234


def build(family):
    """(model, keyword inputs with labels) of one family."""
    import torch
    import transformers as tf

    if family == "llama":
        cfg = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                             num_attention_heads=HEADS, num_key_value_heads=HEADS // 2,
                             max_position_embeddings=POSITIONS)
        model = tf.LlamaForCausalLM(cfg)
    elif family == "bert":
        cfg = tf.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                            num_attention_heads=HEADS, max_position_embeddings=POSITIONS, num_labels=3)
        model = tf.BertForSequenceClassification(cfg)
    elif family == "gpt2":
        cfg = tf.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_inner=FFN, n_layer=LAYERS, n_head=HEADS,
                            n_positions=POSITIONS)
        model = tf.GPT2LMHeadModel(cfg)
    else:
        raise SystemExit(f"unknown family {family!r}")
    # The eager attention: the same torch calls whatever kernels the machine's torch offers.
    model.config._attn_implementation = "eager"
    model.train()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    if family == "bert":
        return model, {"input_ids": ids, "labels": torch.randint(0, 3, (BATCH,))}
    return model, {"input_ids": ids, "labels": ids}


def config(task, dump_path):
    section = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "statistics":
        section.update(tensor_list=[], summary_mode="statistics")
    return {"task": task, "dump_path": dump_path, "level": "L1", "rank": [], "step": [], "async_dump": False,
            "extra_info": True, task: section}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--family", required=True, choices=["llama", "bert", "gpt2"])
    p.add_argument("--tool", required=True, choices=["numprobe", "msprobe"])
    p.add_argument("--task", required=True, choices=["tensor", "statistics"])
    p.add_argument("--dump-path", required=True)
    a = p.parse_args()
    if a.tool == "msprobe":
        from msprobe.pytorch import PrecisionDebugger, seed_all
    else:
        from numprobe.pytorch import PrecisionDebugger, seed_all
    seed_all(seed=SEED)
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = os.path.join(tmp, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(config(a.task, os.path.abspath(a.dump_path)), f)
        debugger = PrecisionDebugger(config_path=cfg_path)
        model, batch = build(a.family)
        debugger.start(model=model)
        loss = model(**batch).loss
        loss.backward()
        debugger.stop()
        debugger.step()


if __name__ == "__main__":
    main()
