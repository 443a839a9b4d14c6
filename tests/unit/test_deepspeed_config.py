"""The DeepSpeed config generated from our options, and a user's --ds-config merged over it
(pure: no torch, no deepspeed)."""
import json

import pytest

from llmdissect.engines.deepspeed_config import effective_ds_config, validate_deepspeed
from llmdissect.errors import UserError
from llmdissect.workloads.train_config import TrainConfig


def cfg(**kw) -> TrainConfig:
    base = dict(model="debug-llama", engine="deepspeed", nproc=2, device="cpu")
    return TrainConfig(**{**base, **kw})


def test_generated_follows_the_options():
    ds = effective_ds_config(cfg(zero=3, offload="params", micro_batch=2, grad_accum=4, dtype="bf16"), dp=2)
    assert ds["train_batch_size"] == 2 * 4 * 2 and ds["gradient_accumulation_steps"] == 4
    zero = ds["zero_optimization"]
    assert zero["stage"] == 3 and zero["offload_param"] == {"device": "cpu", "pin_memory": False}
    assert zero["offload_optimizer"]["device"] == "cpu" and zero["reduce_bucket_size"] <= 5e8
    assert ds["bf16"]["enabled"] and not ds["fp16"]["enabled"]
    assert "torch_adam" not in ds["optimizer"]["params"]  # offloaded: DeepSpeedCPUAdam
    assert effective_ds_config(cfg(zero=1), dp=2)["optimizer"]["params"]["torch_adam"] is True
    assert effective_ds_config(cfg(zero=2, device="cuda", offload="optimizer"), dp=2)[
        "zero_optimization"]["offload_optimizer"]["pin_memory"] is True


def test_user_file_is_merged_and_checked(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 1000},
                                "fp16": {"enabled": False}, "gradient_clipping": 1.0}))
    ds = effective_ds_config(cfg(zero=2, ds_config=str(path)), dp=2)
    assert ds["zero_optimization"] == {**ds["zero_optimization"], "stage": 2, "overlap_comm": True,
                                       "reduce_bucket_size": 1000}
    assert ds["gradient_clipping"] == 1.0 and ds["train_micro_batch_size_per_gpu"] == 1
    with pytest.raises(UserError, match=r"zero_optimization.stage is 2 .*--zero"):
        effective_ds_config(cfg(zero=3, ds_config=str(path)), dp=2)
    path.write_text('{"zero_optimization": {"stage": "3"}}')
    with pytest.raises(UserError, match="unknown ZeRO stage"):
        effective_ds_config(cfg(zero=3, ds_config=str(path)), dp=2)
    path.write_text('{"optimizer": {"type": "Lamb"}}')
    with pytest.raises(UserError, match="not AdamW"):
        effective_ds_config(cfg(ds_config=str(path)), dp=2)
    path.write_text('[1, 2]')
    with pytest.raises(UserError, match="JSON object"):
        effective_ds_config(cfg(ds_config=str(path)), dp=2)


def test_offload_needs_its_stage():
    with pytest.raises(UserError, match="--zero 3"):
        validate_deepspeed(cfg(zero=2, offload="params"), 2)
    with pytest.raises(UserError, match="--zero 1, 2 or 3"):
        validate_deepspeed(cfg(zero=0, offload="optimizer"), 2)
    with pytest.raises(UserError, match="adamw"):
        validate_deepspeed(cfg(zero=1, optimizer="adamw-fused"), 2)
    validate_deepspeed(cfg(zero=1, offload="optimizer"), 2)
