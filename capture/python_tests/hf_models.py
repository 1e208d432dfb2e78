"""Tiny HuggingFace `transformers` models (random init from small configs: nothing is
downloaded) trained one AdamW step each under numprobe's or msprobe's PrecisionDebugger, so both
tools dump the same run. Step i of the dump is model i: Llama (causal LM), BERT (sequence
classification with a padding mask), GPT-2 (causal LM), ViT (image classification); hidden size
64, two layers (`build` takes other sizes for benchmarks).

usage: python hf_models.py numprobe|msprobe CONFIG.json [trainer]

With `trainer`, the Llama model instead goes through two steps of the loop a Trainer runs:
two micro-batches under bfloat16 autocast with their gradients accumulated, gradient norm
clipping, AdamW with weight decay, a learning-rate schedule, gradients set to None.
"""
import sys

import torch
import transformers as tf

MODELS = ("llama", "bert", "gpt2", "vit")


def build(name, hidden=64, layers=2, seq=8, batch=2, image=16):
    """The model and one batch of inputs (seeded: both tools get the same weights and data).

    The defaults are the tests' tiny models; benchmarks scale `hidden` (a multiple of 4 heads),
    `layers`, `seq`, `batch` and ViT's `image` (pixels a side, patches of 4); the padding mask
    and the MLP width follow.
    """
    torch.manual_seed({"llama": 1, "bert": 2, "gpt2": 3, "vit": 4}[name])
    ids = torch.randint(0, 128, (batch, seq))
    positions = max(64, seq)
    if name == "llama":
        cfg = tf.LlamaConfig(vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden,
                             num_hidden_layers=layers, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=positions)
        return tf.LlamaForCausalLM(cfg), {"input_ids": ids, "labels": ids}
    if name == "bert":
        cfg = tf.BertConfig(vocab_size=128, hidden_size=hidden, num_hidden_layers=layers,
                            num_attention_heads=4, intermediate_size=2 * hidden,
                            max_position_embeddings=positions, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, num_labels=2)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[1, seq * 5 // 8:] = 0  # the second sequence is padded
        return tf.BertForSequenceClassification(cfg), {
            "input_ids": ids, "attention_mask": mask,
            "labels": torch.arange(batch) % 2}
    if name == "gpt2":
        cfg = tf.GPT2Config(vocab_size=128, n_embd=hidden, n_layer=layers, n_head=4,
                            n_positions=positions, resid_pdrop=0.0, embd_pdrop=0.0,
                            attn_pdrop=0.0)
        return tf.GPT2LMHeadModel(cfg), {"input_ids": ids, "labels": ids}
    cfg = tf.ViTConfig(image_size=image, patch_size=4, num_channels=3, hidden_size=hidden,
                       num_hidden_layers=layers, num_attention_heads=4,
                       intermediate_size=2 * hidden, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, num_labels=3)
    return tf.ViTForImageClassification(cfg), {
        "pixel_values": torch.randn(batch, 3, image, image),
        "labels": torch.arange(batch) * 2 % 3}


def trainer_steps(dbg, steps=2, micro_batches=2):
    model, batch = build("llama")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    model.train()
    for _ in range(steps):
        dbg.start(model=model)
        for _ in range(micro_batches):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(**batch).loss / micro_batches
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        model.zero_grad(set_to_none=True)
        dbg.stop()
        dbg.step()


def main():
    tool, cfg_path = sys.argv[1:3]
    torch.set_num_threads(1)
    # The models are built before the debugger, as in most scripts: a function a model stored
    # at construction (GELUActivation's F.gelu) is then one msprobe cannot see.
    runs = [build(n) for n in MODELS]
    if tool == "msprobe":
        from msprobe.pytorch import PrecisionDebugger
    else:
        from numprobe.pytorch import PrecisionDebugger
    dbg = PrecisionDebugger(config_path=cfg_path)
    if sys.argv[3:] == ["trainer"]:
        trainer_steps(dbg)
        return
    for model, batch in runs:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model.train()
        dbg.start(model=model)
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        dbg.stop()
        dbg.step()


if __name__ == "__main__":
    main()
