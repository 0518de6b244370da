"""Run by test_trl.py: MTGRPOTrainer (TRL) in one process, or in two under torch.distributed.run
(gloo, CPU). Greedy generation and rewards that depend only on the prompt and the rollout's place
in its group make the rollouts identical whatever the process count, so z, the quotas and the
policy must be too."""

import json
import os
import sys
import time

import torch


def reward(prompts, completions, **kw):  # rollout j of a group: 1 when j < (digit sum mod 4)
    out = []
    for i, p in enumerate(prompts):
        text = p if isinstance(p, str) else p[-1]["content"]
        out.append(1.0 if i % 4 < sum(int(c) for c in text if c.isdigit()) % 4 else 0.0)
    return out


def run(model_dir: str, out_dir: str, per_device: int, steps: int = 2) -> dict:
    from datasets import Dataset
    from mtgrpo.trl import MTGRPOConfig, MTGRPOTrainer, per_task_reward
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    rows = [{"prompt": f"c{i % 10}{(i * 7) % 10}=", "task": t} for i in range(16) for t in ("easy", "hard")]
    args = MTGRPOConfig(output_dir=out_dir, max_steps=steps, per_device_train_batch_size=per_device,
                        num_generations=4, max_completion_length=3, learning_rate=1e-3,
                        use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                        logging_steps=1, seed=0, disable_tqdm=True, N_rs=3,
                        generation_kwargs={"do_sample": False}, zero_grad_filter="strict")
    tr = MTGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir),
                       processing_class=AutoTokenizer.from_pretrained(model_dir),
                       reward_funcs=per_task_reward({"easy": reward, "hard": reward}),
                       args=args, train_dataset=Dataset.from_list(rows))
    t0 = time.perf_counter()
    tr.train()
    secs = (time.perf_counter() - t0) / steps
    params = torch.cat([p.detach().flatten() for p in tr.accelerator.unwrap_model(tr.model).parameters()])
    return {"world": tr.accelerator.num_processes, "z": tr.weighter.z.tolist(),
            "hist": [{k: h[k] for k in ("z", "requested", "realized", "rounds", "improvement")}
                     for h in tr.mt_history],
            "loss": [h["loss"] for h in tr.state.log_history if "loss" in h],
            "param_sum": float(params.double().sum()), "param_abs": float(params.double().abs().sum()),
            "sec_per_step": secs}


if __name__ == "__main__":
    model_dir, out_json, per_device = sys.argv[1], sys.argv[2], int(sys.argv[3])
    res = run(model_dir, os.path.dirname(out_json), per_device)
    if int(os.environ.get("RANK", "0")) == 0:
        with open(out_json, "w") as f:
            json.dump(res, f)
