"""Checkpoints as published: folders that Hugging Face's `transformers` writes with
`save_pretrained(..., max_shard_size=...)`, loaded by `safetensors::Checkpoint` into
derived Rust models (a GPT-2 whose forward pass is written in ndarray, a Llama), in
float32 and bfloat16 (converted on load, bit for bit as PyTorch's `.float()`), read
reading only what a struct takes, mapped into a torch module without a copy, and written
back in the layout `from_pretrained` reads."""

import json
import os
import re
import shutil

import pytest
import torch
import transformers

GPT2 = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
IDS = [3, 141, 59, 265, 358, 979, 323, 84, 62, 64, 33]


def gpt2(**config):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(**{**GPT2, **config})
    return transformers.GPT2LMHeadModel(cfg).eval()


def logits_of(model, ids=IDS):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def shards(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))


@pytest.fixture(scope="module")
def gpt2_f32(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2-f32")
    model = gpt2()
    model.save_pretrained(folder, max_shard_size="100KB")
    return folder, model


@pytest.fixture(scope="module")
def gpt2_bf16(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2-bf16")
    model = gpt2().to(torch.bfloat16)
    model.save_pretrained(folder, max_shard_size="60KB")
    return folder, model


def test_transformers_writes_shards_and_an_index(gpt2_f32, gpt2_bf16):
    for folder, _ in (gpt2_f32, gpt2_bf16):
        assert len(shards(folder)) > 2
        assert os.path.exists(folder / "model.safetensors.index.json")


def test_a_gpt2_forward_pass_in_rust_gives_transformers_logits(ext, gpt2_f32):
    folder, model = gpt2_f32
    ours = torch.from_dlpack(ext.gpt2_logits(str(folder), IDS, GPT2["n_head"]))
    theirs = logits_of(model)
    assert ours.shape == theirs.shape == (len(IDS), GPT2["vocab_size"])
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_a_bf16_checkpoint_converted_on_load_gives_the_same_logits(ext, gpt2_bf16):
    folder, model = gpt2_bf16
    # Without conversion, the float32 fields refuse bfloat16 tensors, by name.
    with pytest.raises(ValueError, match="tensors are bfloat16 where the value takes float32"):
        ext.gpt2_logits(str(folder), IDS, GPT2["n_head"])
    ours = torch.from_dlpack(ext.gpt2_logits(str(folder), IDS, GPT2["n_head"], "float32"))
    theirs = logits_of(model.float())
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def as_bits(t):
    return t.contiguous().view(torch.int32 if t.element_size() == 4 else torch.int16)


def test_bf16_to_f32_on_load_is_bit_equal_to_torch_float(ext, gpt2_bf16):
    folder, model = gpt2_bf16
    state = model.state_dict()
    tensors, metadata, index = ext.read_checkpoint(str(folder), "float32")
    assert metadata["format"] == "pt"
    assert int(index["total_size"]) > 0
    assert set(tensors) == set(state) - {"lm_head.weight"}
    for name, tensor in tensors.items():
        ours = torch.from_dlpack(tensor)
        assert ours.dtype == torch.float32
        assert torch.equal(as_bits(ours), as_bits(state[name].float())), name
    # Special values: widening is exact for every bfloat16, NaNs included.
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    ext.save_checkpoint({"every": every}, str(folder.parent / "every"), 1 << 20, {"format": "pt"})
    (tensors, _, _) = ext.read_checkpoint(str(folder.parent / "every"), "float32", 2)
    ours = torch.from_dlpack(tensors["every"])
    assert torch.equal(as_bits(ours), as_bits(every.float()))


def test_f16_to_f32_on_load_is_bit_equal_to_torch_float_for_every_value(ext, tmp_path):
    # Every float16 bit pattern: subnormals, infinities, and NaNs with every payload,
    # signalling ones included (torch quiets them, as the hardware conversion does).
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    ext.save_checkpoint({"every": every}, str(tmp_path), 1 << 20, {"format": "pt"})
    for threads in (1, 2):
        (tensors, _, _) = ext.read_checkpoint(str(tmp_path), "float32", threads)
        ours = torch.from_dlpack(tensors["every"])
        assert torch.equal(as_bits(ours), as_bits(every.float()))
        (tensors, _, _) = ext.read_checkpoint(str(tmp_path), "float64", threads)
        ours = torch.from_dlpack(tensors["every"])
        theirs = every.double().view(torch.int64)
        assert torch.equal(ours.contiguous().view(torch.int64), theirs)


def test_narrowing_on_load_matches_torch(ext, tmp_path):
    torch.manual_seed(1)
    values = torch.randn(4096, dtype=torch.float64) * 100
    # Ties and their neighbours, infinities, NaN, the largest values, subnormals.
    special = torch.tensor(
        [1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 1e-12, 3.4e38, -3.4e38, 1e-40, 65504.0, 65520.0,
         float("inf"), float("-inf"), float("nan"), 0.0, -0.0],
        dtype=torch.float64,
    )
    values = torch.cat([values, special])
    for source in (torch.float64, torch.float32):
        folder = tmp_path / str(source)
        ext.save_checkpoint({"x": values.to(source)}, str(folder), 1 << 20)
        for target, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
            (tensors, _, _) = ext.read_checkpoint(str(folder), name)
            ours = torch.from_dlpack(tensors["x"])
            theirs = values.to(source).to(target)
            assert ours.dtype == target
            nan = torch.isnan(theirs)
            assert torch.equal(torch.isnan(ours), nan)
            assert torch.equal(as_bits(ours[~nan]), as_bits(theirs[~nan])), (source, target)


def test_a_llama_loads_into_a_derived_struct_bit_equal_to_torch_float(ext, tmp_path):
    torch.manual_seed(2)
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
    )
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(tmp_path, max_shard_size="100KB")
    assert len(shards(tmp_path)) > 2
    state = model.state_dict()
    loaded = ext.llama_as_f32(str(tmp_path))
    assert set(loaded) == set(state)
    for name, tensor in loaded.items():
        ours = torch.from_dlpack(tensor)
        assert torch.equal(as_bits(ours), as_bits(state[name].float())), name


# Megatron's splits: column-parallel projections by output rows, row-parallel ones by
# input columns; everything else replicated.
SPLITS = {
    "q_proj": 0,
    "k_proj": 0,
    "v_proj": 0,
    "gate_proj": 0,
    "up_proj": 0,
    "o_proj": 1,
    "down_proj": 1,
}


def split_of(name):
    return next((dim for key, dim in SPLITS.items() if f".{key}." in name), None)


def header_bytes(folder):
    """The bytes opening a checkpoint reads: the index, and each shard's header."""
    total = os.path.getsize(folder / "model.safetensors.index.json")
    for shard in shards(folder):
        with open(folder / shard, "rb") as f:
            total += 8 + int.from_bytes(f.read(8), "little")
    return total


def test_each_tensor_parallel_rank_of_a_llama_reads_its_chunk(ext, tmp_path):
    torch.manual_seed(3)
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=256,
    )
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(tmp_path, max_shard_size="60KB")
    assert len(shards(tmp_path)) > 2
    state = model.state_dict()
    assert {split_of(n) for n in state} == {0, 1, None}
    headers = header_bytes(tmp_path)
    for world in [1, 2, 4]:
        ranks = []
        for rank in range(world):
            before = rchar()
            loaded = ext.llama_rank(str(tmp_path), rank, world)
            read = rchar() - before
            ranks.append({k: torch.from_dlpack(v) for k, v in loaded.items()})
            assert set(loaded) == set(state)
            share = 0
            for name, full in state.items():
                dim = split_of(name)
                theirs = full.float()
                if dim is not None:
                    theirs = torch.chunk(theirs, world, dim)[rank]
                ours = ranks[-1][name]
                assert ours.shape == theirs.shape, (name, rank, world)
                assert torch.equal(as_bits(ours), as_bits(theirs)), (name, rank, world)
                stored = full.numel() * full.element_size()
                share += stored if dim is None else stored // world
            # The rank's bytes, each row segment of a dim-1 split read exactly, and the
            # headers opening reads: nothing more.
            assert share <= read - headers <= share * 1.01, (read, headers, share, world)
        for name, full in state.items():
            dim = split_of(name)
            if dim is not None:
                whole = torch.cat([r[name] for r in ranks], dim)
                assert torch.equal(as_bits(whole), as_bits(full.float())), name
    message = "invalid tensor-parallel rank 4: the ranks of a world of size 4 are 0 to 3"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ext.llama_rank(str(tmp_path), 4, 4)
    # 64 rows of `q_proj` do not split between 3 ranks: refused before reading, naming
    # the tensors (grouped by pattern, one line for each way they fail), their full
    # shape (as Python writes it), the dimension and the world size.
    def cannot(names, shape, dim, extent):
        listed = ", ".join(f"'model.layers.{{0,1}}.{n}.weight' (2)" for n in names)
        return (
            f"tensors {listed}: cannot split a tensor of shape {shape} along dimension "
            f"{dim} between 3 ranks: {extent} is not a multiple of 3"
        )

    attn = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]
    message = "state_dict does not fit: " + "; ".join([
        cannot(attn, "(64, 64)", 0, 64),
        cannot(["self_attn.o_proj"], "(64, 64)", 1, 64),
        cannot(["mlp.gate_proj", "mlp.up_proj"], "(128, 64)", 0, 128),
        cannot(["mlp.down_proj"], "(64, 128)", 1, 128),
    ])
    before = rchar()
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ext.llama_rank(str(tmp_path), 0, 3)
    split = [t for n, t in state.items() if split_of(n) is not None]
    smallest = min(t.numel() * t.element_size() for t in split)
    assert rchar() - before < headers + smallest


def test_from_pretrained_reads_a_checkpoint_written_in_rust(ext, gpt2_f32, tmp_path):
    folder, model = gpt2_f32
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    ext.save_checkpoint(state, str(tmp_path), 120_000, {"format": "pt"})
    assert len(shards(tmp_path)) > 2
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(t.numel() * 4 for t in state.values())
    assert set(index["weight_map"]) == set(state)
    model.config.save_pretrained(tmp_path)
    again = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert torch.equal(logits_of(again), logits_of(model))
    # Saved again, smaller than a shard: one file, and no shard or index left behind.
    small = {"transformer.wte.weight": state["transformer.wte.weight"]}
    ext.save_checkpoint(small, str(tmp_path), 1 << 30, {"format": "pt"})
    assert shards(tmp_path) == ["model.safetensors"]
    assert not os.path.exists(tmp_path / "model.safetensors.index.json")


def test_a_mapped_checkpoint_becomes_a_modules_parameters_without_a_copy(ext, gpt2_f32):
    folder, model = gpt2_f32
    mapped = {k: torch.from_dlpack(v) for k, v in ext.map_checkpoint(str(folder)).items()}
    fresh = transformers.GPT2LMHeadModel(model.config).eval()
    result = fresh.load_state_dict(mapped, strict=False, assign=True)
    assert result.unexpected_keys == []
    assert set(result.missing_keys) <= {"lm_head.weight"}
    fresh.tie_weights()
    params = dict(fresh.named_parameters())
    for name, tensor in mapped.items():
        assert params[name].data_ptr() == tensor.data_ptr(), name
    assert torch.equal(logits_of(fresh), logits_of(model))


def rchar():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def test_one_layer_of_twelve_reads_that_layers_bytes(ext, tmp_path):
    model = gpt2(n_layer=12, n_embd=256, n_head=4)
    model.save_pretrained(tmp_path, max_shard_size="5MB")
    assert len(shards(tmp_path)) >= 4
    total = sum(os.path.getsize(tmp_path / f) for f in shards(tmp_path))
    before = rchar()
    ln_1, unexpected, layer_bytes = ext.gpt2_fifth_layer(str(tmp_path))
    read = rchar() - before
    # Everything: the index, the headers, the layer; a twelfth of the file at most.
    assert layer_bytes <= read <= layer_bytes * 1.01, (read, layer_bytes, total)
    assert read < total / 10
    expected = model.transformer.h[5].ln_1.weight.detach()
    assert torch.equal(torch.from_dlpack(ln_1), expected)
    assert "transformer.h.4.ln_1.weight" in unexpected
    assert not any(name.startswith("transformer.h.5.") for name in unexpected)


def test_the_index_is_the_allowlist_from_python(ext, gpt2_f32, tmp_path):
    folder, _ = gpt2_f32
    target = tmp_path / "copy"
    shutil.copytree(folder, target)
    index = json.loads((target / "model.safetensors.index.json").read_text())
    # A stale shard from an earlier save that also holds `transformer.wte.weight`, of
    # other values, unlisted: never read.
    stale = {"transformer.wte.weight": torch.zeros(GPT2["vocab_size"], GPT2["n_embd"])}
    ext.save_checkpoint(stale, str(tmp_path / "stale"), 1 << 30)
    shutil.copy(tmp_path / "stale" / "model.safetensors", target / "model-00099-of-00099.safetensors")
    (tensors, _, _) = ext.read_checkpoint(str(target))
    assert set(tensors) == set(index["weight_map"])
    wte = torch.from_dlpack(tensors["transformer.wte.weight"])
    assert wte.abs().sum() > 0
    # Hostile indexes: typed errors, nothing outside the folder opened.
    for weight_map, words in (
        ({"transformer.wte.weight": "../outside.safetensors"}, "path separator"),
        ({"transformer.wte.weight": "/etc/passwd"}, "path separator"),
        ({"transformer.wte.weight": 3}, "not a file name"),
        ({"transformer.wte.weight": "missing.safetensors"}, "missing.safetensors"),
        ({"nope": index["weight_map"]["transformer.wte.weight"]}, "does not hold it"),
    ):
        (target / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
        with pytest.raises((ValueError, OSError, FileNotFoundError), match=words):
            ext.read_checkpoint(str(target))
    (target / "model.safetensors.index.json").write_text(
        '{"weight_map": {"a": "model-00001-of-00007.safetensors", "a": "x"}}'
    )
    with pytest.raises(ValueError, match="appears twice"):
        ext.read_checkpoint(str(target))
