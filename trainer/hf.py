"""
Hugging Face's GPT-2 layout in and out: weights to start a run from (OpenAI's GPT-2, any GPT-2-style
transformers folder, or one of this project's checkpoints), and a checkpoint exported as a folder that
transformers, vLLM and lm-evaluation-harness load as GPT2LMHeadModel. A model with Llama's internals
(LLAMA_SETTINGS: rotary positions in the rotate-half layout model.py uses, RMSNorm, SwiGLU; tied head or not,
biases or not: Llama's attention_bias and mlp_bias) exports as LlamaForCausalLM instead: c_attn splits into
q_proj, k_proj and v_proj, the rest is renamed (LLAMA_NAMES). The same with qk_norm=True and no biases
(QWEN3_SETTINGS) exports as Qwen3ForCausalLM: Llama's tensors plus each layer's q_norm and k_norm gains, at ones.
Any other mix of settings has no transformers class and is refused.

The two layouts hold the same tensors under the same names, except that transformers keeps GPT-2's
linear layers as Conv1D with (in, out) weights, so c_attn, c_proj and c_fc are transposed each way,
and it stores the tied LM head once, as the token embedding. GPT-2 uses the tanh approximation of
GELU ('gelu_tanh' here, 'gelu_new' there). GPT-2's 50257 tokens are padded to 50304 rows on import
(matmuls are faster at a multiple of 64); the model masks the padding out of its logits, and an
export drops it again. transformers' GPT-2 always has biases, so a bias=False model is exported with
zero biases and "bias": false in config.json, and imported bias-free again.
"""
import json
import os
import shutil
import time

import torch

from model import GPT, NORM_EPS, GPTConfig, model_config
from trainer import RunError, checkpoint

GPT2_MODELS = {name: f"openai-community/{name}" for name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")}
ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new"}  # ours -> transformers' name
HF_TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # the same function to float rounding
TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
SHARD_BYTES = 4_000_000_000  # model.safetensors up to this size, else shards and an index
PAD_TO = 64
EXPORTED_BIAS = "bias"  # config.json's record of a bias=False model, whose export writes zero biases
# the settings each transformers class computes (GPT-2's activation: one of ACTIVATIONS); each ties the head to the
# embedding or not (tie_word_embeddings), and the export says which
GPT2_SETTINGS = dict(position="learned", norm="layernorm", qk_norm=False, logit_softcap=0.0)
LLAMA_SETTINGS = dict(position="rope", norm="rmsnorm", activation="swiglu", qk_norm=False, logit_softcap=0.0)
# Qwen3 is Llama plus an RMSNorm with a gain over each head's queries and keys before RoPE (q_norm, k_norm): model.py's
# gain-free QK-norm at gains of one. Its MLP has no biases (no mlp_bias), so a model with biases has no Qwen3.
QWEN3_SETTINGS = dict(LLAMA_SETTINGS, qk_norm=True, bias=False)
LLAMA_NAMES = {"ln_1.weight": "input_layernorm.weight", "ln_2.weight": "post_attention_layernorm.weight",
               **{f"{ours}.{kind}": f"{theirs}.{kind}" for kind in ("weight", "bias") for ours, theirs in (
                   ("attn.c_proj", "self_attn.o_proj"), ("mlp.c_gate", "mlp.gate_proj"), ("mlp.c_fc", "mlp.up_proj"),
                   ("mlp.c_proj", "mlp.down_proj"))}}  # the biases where bias=True (attention_bias, mlp_bias)


class WeightsError(RunError):
    """Weights that cannot be read or converted: one line saying what was expected."""


# -----------------------------------------------------------------------------
# in

def load_weights(source, log=print):
    """(model_args, state_dict, encoding name or None) for starting a run from `source`: a GPT-2 name
    (through the Hugging Face cache, so an offline machine uses a downloaded copy), a Hugging Face
    GPT-2-style folder, or this project's ckpt_<N>.pt / ckpt_<N>/."""
    if source in GPT2_MODELS:
        return (*read_hf_folder(_download(source)), "gpt2")
    if not os.path.exists(source):
        raise WeightsError(f"no such model {source!r}: expected {', '.join(GPT2_MODELS)}, a Hugging Face GPT-2 "
                           f"folder, or a ckpt_<N>.pt / ckpt_<N>/ checkpoint")
    if problem := checkpoint.run_folder_problem(source):  # its config.json is train.py's, not a model's
        raise WeightsError(problem)
    if os.path.isfile(os.path.join(source, "config.json")):
        return (*read_hf_folder(source), None)
    if os.path.isdir(source) and not os.path.isfile(os.path.join(source, checkpoint.TRAINER_STATE)):
        raise WeightsError(f"{source} is neither a Hugging Face folder (no config.json) nor a ckpt_<N>/ checkpoint")
    state = _load_checkpoint(source, log)
    return dict(state["model_args"]), checkpoint_weights(state), state.get("encoding")


def from_pretrained(name_or_path, **overrides):
    """OpenAI's GPT-2 ('gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl'), a Hugging Face GPT-2 folder or
    one of this project's checkpoints, as a GPT; overrides set non-architecture fields (dropout=0.1)."""
    args, weights, _ = load_weights(name_or_path, log=lambda message: None)
    model = GPT(model_config(saved_args=args, **overrides))
    model.load_state_dict(weights)
    return model


def _download(name):
    from huggingface_hub import snapshot_download
    try:
        return snapshot_download(GPT2_MODELS[name], allow_patterns=["*.json", "*.safetensors"])
    except Exception as e:
        raise WeightsError(f"cannot get {name} from the Hugging Face hub or its cache ({type(e).__name__}); "
                           f"download it once where there is a network, or pass a local folder") from None


def read_hf_folder(folder):
    """(model_args, state_dict) of a transformers GPT-2 folder: config.json plus model.safetensors or
    pytorch_model.bin, either one sharded with an index; the head tied to the embedding, or its own where
    tie_word_embeddings is false (as export writes an untied model)."""
    try:
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
        kind = config.get("model_type")
        if kind != "gpt2":
            raise WeightsError(f"{folder} holds a {kind!r} model; only GPT-2-style models (model_type 'gpt2') convert")
        _check_config(config, folder)
        expected = _expected_shapes(config)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise WeightsError(f"{folder}/config.json is not a readable GPT-2 config ({type(e).__name__}: {e})") from None
    weights = {}
    for name, t in _read_tensors(folder).items():
        name = "transformer." + name.removeprefix("transformer.")  # old files lack the prefix
        if name.endswith(TRANSPOSED):
            t = t.t()
        if name in expected:
            weights[name] = t
        elif name == "transformer.lm_head.weight" and t.shape == expected["transformer.wte.weight"]:
            weights[name] = t  # checked below: tied, it must be the embedding
        # other tensors: the causal-mask buffers of old files, or a task head (score, multiple choice)
    tied = config.get("tie_word_embeddings", True)
    if not tied:
        expected = {**expected, "transformer.lm_head.weight": expected["transformer.wte.weight"]}
    missing = sorted(set(expected) - set(weights))
    if missing:
        raise WeightsError(f"{folder} lacks {len(missing)} GPT-2 tensor(s), e.g. {missing[0]}: truncated or not GPT-2")
    for name, shape in expected.items():
        if tuple(weights[name].shape) != shape:
            raise WeightsError(f"{folder}: {name} has shape {tuple(weights[name].shape)}, config.json implies {shape}")
    head = weights.pop("transformer.lm_head.weight", None)
    if tied and head is not None and not torch.equal(head, weights["transformer.wte.weight"]):
        raise WeightsError(f"{folder}: its LM head differs from the token embedding although config.json ties "
                           "them (tie_word_embeddings): set it false there if the head is its own")
    # a bias-free model exported here has zero biases and says so: it comes back bias-free, unless
    # the biases were trained since (in transformers)
    zero_biases = all(not v.any() for k, v in weights.items() if k.endswith(".bias"))
    bias = not (config.get(EXPORTED_BIAS) is False and zero_biases)
    if not bias:
        weights = {k: v for k, v in weights.items() if not k.endswith(".bias")}
    n_tokens = config["vocab_size"]
    padded = -(-n_tokens // PAD_TO) * PAD_TO
    weights = {k: v.float().contiguous() for k, v in weights.items()}
    pad = lambda t: torch.cat([t, t.new_zeros(padded - n_tokens, t.size(1))]).float().contiguous()
    weights["transformer.wte.weight"] = pad(weights["transformer.wte.weight"])
    weights["lm_head.weight"] = weights["transformer.wte.weight"] if tied else pad(head)
    args = dict(n_layer=config["n_layer"], n_head=config["n_head"], n_embd=config["n_embd"],
                block_size=config["n_positions"], vocab_size=padded, bias=bias, tie_embeddings=tied,
                activation="gelu" if config.get("activation_function", "gelu_new") == "gelu" else "gelu_tanh",
                n_tokens=n_tokens if padded > n_tokens else 0)
    return args, weights


def _check_config(config, folder):
    """Refuse, in one line, a GPT-2 variant that this model would compute differently."""
    different = {
        "activation_function": config.get("activation_function", "gelu_new") not in ("gelu", *HF_TANH_GELUS),
        "n_inner": config.get("n_inner") not in (None, 4 * config["n_embd"]),
        "layer_norm_epsilon": config.get("layer_norm_epsilon", NORM_EPS) != NORM_EPS,
        "scale_attn_weights": not config.get("scale_attn_weights", True),
        "scale_attn_by_inverse_layer_idx": config.get("scale_attn_by_inverse_layer_idx", False),
        "add_cross_attention": config.get("add_cross_attention", False),
    }
    wrong = [key for key, is_different in different.items() if is_different]
    if wrong:
        raise WeightsError(f"{folder}: {wrong[0]}={config.get(wrong[0])!r} differs from GPT-2's; this model cannot "
                           "compute it")


def _gpt2_shapes(n_layer, n_head, n_embd, block_size, vocab_size):
    """{name: shape} of a GPT-2 (biases included, the tied head left out) in this model's layout."""
    with torch.device("meta"):
        model = GPT(GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                              vocab_size=vocab_size, bias=True))
    return {k: tuple(v.shape) for k, v in model.state_dict().items() if k != "lm_head.weight"}


def _expected_shapes(config):
    return _gpt2_shapes(config["n_layer"], config["n_head"], config["n_embd"], config["n_positions"],
                        config["vocab_size"])


def _torch_bin(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # files older than torch 1.6's zip format cannot be memory-mapped
        return torch.load(path, map_location="cpu", weights_only=True)


def _read_tensors(folder):
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    for name, load in (("model.safetensors", load_file), ("pytorch_model.bin", _torch_bin)):
        index = os.path.join(folder, name + ".index.json")
        try:
            if os.path.isfile(index):
                with open(index) as f:
                    files = sorted(set(json.load(f)["weight_map"].values()))
            elif os.path.isfile(os.path.join(folder, name)):
                files = [name]
            else:
                continue
        except (OSError, ValueError, KeyError, AttributeError) as e:
            raise WeightsError(f"{index} is not a readable weight index ({type(e).__name__}: {e})") from None
        tensors = {}
        for file in files:
            try:
                tensors.update(load(os.path.join(folder, file)))
            except (OSError, RuntimeError, SafetensorError, ValueError, EOFError) as e:
                raise WeightsError(f"cannot read {os.path.join(folder, file)} ({str(e).splitlines()[0]}): "
                                   "missing or truncated? download it again") from None
        return tensors
    raise WeightsError(f"{folder} has config.json but no model.safetensors or pytorch_model.bin (nor their index)")


def _load_checkpoint(path, log):
    try:
        return checkpoint.load_checkpoint(path, log=log)
    except checkpoint.CheckpointError as e:
        raise WeightsError(str(e)) from None


def checkpoint_weights(state):
    """The model's full state dict from a loaded checkpoint: a .pt's own (memory-mapped), or a sharded
    folder's read into a CPU model built without initialising it (one copy of the weights in RAM)."""
    if "sharded_path" not in state:
        return state["model"]
    with torch.device("meta"):
        model = GPT(model_config(saved_args=state["model_args"]))
    model.to_empty(device="cpu")
    try:
        checkpoint.restore(state, model)
    except checkpoint.CheckpointError as e:
        raise WeightsError(str(e)) from None
    return model.state_dict()


# -----------------------------------------------------------------------------
# out

def export_layout(args, source):
    """'gpt2', 'llama' or 'qwen3': the transformers class that computes what a model of args (a GPTConfig) computes;
    for any other mix of settings a WeightsError naming what the nearest of the three lacks (Llama or Qwen3 by the
    model's qk_norm, or GPT-2), so that the line names only the settings to change."""
    def lacking(settings, activations=None):
        wrong = [f"{k}={getattr(args, k)!r}" for k, v in settings.items() if getattr(args, k) != v]
        return wrong + ([f"activation={args.activation!r}"] if activations and args.activation not in activations
                        else [])
    modern = ("qwen3", "Qwen3", QWEN3_SETTINGS) if args.qk_norm else ("llama", "Llama", LLAMA_SETTINGS)
    gaps = {"gpt2": ("GPT-2", lacking(GPT2_SETTINGS, ACTIVATIONS)), modern[0]: (modern[1], lacking(modern[2]))}
    layout = min([modern[0], "gpt2"], key=lambda k: len(gaps[k][1]))  # a tie names Llama's or Qwen3's gap
    name, gap = gaps[layout]
    if gap:
        llama = ", ".join(f"{k}={v!r}" for k, v in LLAMA_SETTINGS.items())
        raise WeightsError(f"{source}: {name}'s layout, the nearest, has no {', '.join(gap)}: transformers loads "
                           f"GPT-3's settings (as GPT-2), Llama's ({llama}) or those with qk_norm=True and bias=False "
                           f"(as Qwen3); scripts/eval.py evaluates any checkpoint")
    return layout


def _llama_config_fields(args):
    """The fields LlamaConfig and Qwen3Config share, for a model of args: one rms_norm_eps serves every RMSNorm
    there, as NORM_EPS does here (layers, final norm and QK-norm alike); RoPE's plain ('default') frequencies at
    the checkpoint's rope_theta, in transformers 5's rope_parameters; every head its own keys and values."""
    return dict(hidden_size=args.n_embd, intermediate_size=args.mlp_hidden(), num_hidden_layers=args.n_layer,
                num_attention_heads=args.n_head, num_key_value_heads=args.n_head, hidden_act="silu",
                max_position_embeddings=args.block_size, rms_norm_eps=NORM_EPS,
                rope_parameters=dict(rope_type="default", rope_theta=args.rope_theta),
                tie_word_embeddings=args.tie_embeddings, attention_bias=args.bias)


def _hf_config(args, layout, rows, eot, dtype_name):
    """config.json's transformers config for a model of args in layout ('gpt2', 'llama' or 'qwen3')."""
    from transformers import GPT2Config, LlamaConfig, Qwen3Config
    common = dict(vocab_size=rows, bos_token_id=eot, eos_token_id=eot, dtype=dtype_name)
    if layout in ("llama", "qwen3"):
        if layout == "llama":
            config = LlamaConfig(**_llama_config_fields(args), mlp_bias=args.bias, architectures=["LlamaForCausalLM"],
                                 **common)
        else:  # Qwen3Config's defaults are Qwen3-8B's: a head_dim of 128, a sliding window it could turn on
            config = Qwen3Config(**_llama_config_fields(args), head_dim=args.n_embd // args.n_head,
                                 use_sliding_window=False, architectures=["Qwen3ForCausalLM"], **common)
        # transformers 4 (and the servers built on it) read the base at the top level, and without it take 10000
        config.rope_theta = args.rope_theta
        return config
    return GPT2Config(n_positions=args.block_size, n_embd=args.n_embd, n_layer=args.n_layer, n_head=args.n_head,
                      activation_function=ACTIVATIONS[args.activation], layer_norm_epsilon=NORM_EPS, resid_pdrop=0.0,
                      embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=args.tie_embeddings,
                      architectures=["GPT2LMHeadModel"],
                      **common, **{EXPORTED_BIAS: args.bias})


def export(source, out_dir, dtype=torch.bfloat16, log=print, encoding=None):
    """Write `source` (a ckpt_<N>.pt, a ckpt_<N>/ folder, or an out_dir: its newest loadable one) to
    out_dir as a transformers GPT-2, Llama or Qwen3 folder (export_layout): config.json, generation_config.json,
    model.safetensors (sharded with an index past SHARD_BYTES) and, for a GPT-2-pattern encoding, tokenizer
    files. encoding: the tokenizer instead of the checkpoint's record. Everything goes to a temporary folder
    renamed at the end, so out_dir is complete or absent."""
    from transformers import GenerationConfig
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise WeightsError(f"{out_dir} exists and is not an empty folder: choose a new folder for the export")
    state = _newest(source, log)
    dtype_name = str(dtype).removeprefix("torch.")
    args = model_config(saved_args=state["model_args"])
    layout = export_layout(args, source)
    encoding = _encoding(encoding, state, source)
    if encoding is None:
        log("note: the checkpoint records no encoding; writing the model without tokenizer files")
    rows = _exported_rows(args, encoding, source)
    eot = encoding.eot_token if encoding else None
    config = _hf_config(args, layout, rows, eot, dtype_name)
    tensors = {"gpt2": _hf_tensors, "llama": _llama_tensors, "qwen3": _qwen3_tensors}[layout]
    tmp = out_dir.rstrip("/") + ".tmp-export"
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.time()
    try:
        os.makedirs(tmp)
        config.save_pretrained(tmp)
        GenerationConfig(bos_token_id=eot, eos_token_id=eot).save_pretrained(tmp)
        shards = _write_tensors(tensors(checkpoint_weights(state), args, rows, dtype), tmp, dtype)
        if encoding:
            _write_tokenizer(encoding, tmp)
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty, checked above
        os.replace(tmp, out_dir)
    except OSError as e:  # a read-only or full disk: nothing is left half-written
        raise WeightsError(f"cannot write the export beside {out_dir}: {e.strerror or e}; choose a folder this "
                           "user can write, on a disk with room") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"exported step {state.get('iter_num')} to {out_dir} as {config.architectures[0]} ({shards} safetensors "
        f"file(s), {dtype_name}) "
        f"in {time.time() - t0:.1f}s")
    return out_dir


def _newest(source, log):
    if not os.path.exists(source):
        raise WeightsError(f"no such checkpoint or out_dir {source}")
    if os.path.isdir(source) and not os.path.isfile(os.path.join(source, checkpoint.TRAINER_STATE)):
        try:
            found = checkpoint.load_newest(source, log=log)
        except checkpoint.CheckpointError as e:
            raise WeightsError(str(e)) from None
        if found is None:
            raise WeightsError(f"{source} holds no checkpoint (ckpt_<N>.pt or ckpt_<N>/)")
        return found[0]
    return _load_checkpoint(source, log)


def _encoding(name, state, source):
    """The encoding `name` (--encoding) loads as, else the checkpoint's record (found by its hash where the rank
    file moved), or None (then no tokenizer files) where it records none. One that does not load is a
    WeightsError: without it the export would keep the padding rows and no end-of-text, another model."""
    from trainer.tokenizer import get_encoding, recorded
    try:
        found = name or recorded(state, [source, os.path.dirname(os.path.abspath(source))])
        return get_encoding(found) if found else None
    except ValueError as e:
        raise WeightsError(f"the encoding {name or state.get('encoding')!r} does not load ({e}); pass --encoding with "
                           "a rank file that does (scripts/fetch_gpt2_ranks.sh writes GPT-2's to .cache/gpt2.tiktoken)"
                           ) from None


def _exported_rows(args, encoding, source):
    """How many embedding rows are tokens: the padding the model masks, or that past the encoding, goes."""
    if encoding is not None and encoding.n_vocab > (args.n_tokens or args.vocab_size):
        raise WeightsError(f"{source}: its encoding {encoding.name!r} has {encoding.n_vocab} tokens but the model only "
                           f"{args.n_tokens or args.vocab_size}: the tokenizer would emit ids the model lacks")
    if args.n_tokens:
        return args.n_tokens
    if encoding is None or args.vocab_size == encoding.n_vocab:
        return args.vocab_size
    if encoding.n_vocab < args.vocab_size <= -(-encoding.n_vocab // PAD_TO) * PAD_TO:
        return encoding.n_vocab
    raise WeightsError(f"{source}: the model has {args.vocab_size} token rows but its encoding {encoding.name!r} has "
                       f"{encoding.n_vocab} tokens, which is not padding to a multiple of {PAD_TO}: was it trained "
                       "on other data?")


def _hf_tensors(weights, args, rows, dtype):
    """[(name, shape, make)] in transformers' layout; make() converts one tensor when its shard is
    written, so only that shard is in memory beside the (memory-mapped) checkpoint."""
    out = []
    for name, t in weights.items():
        if name == "lm_head.weight" and args.tie_embeddings:  # the embedding itself
            continue
        if name in ("transformer.wte.weight", "lm_head.weight"):
            out.append((name, (rows, t.size(1)), lambda t=t: t[:rows].to(dtype).contiguous()))
        elif name.endswith(TRANSPOSED):
            out.append((name, tuple(t.shape[::-1]), lambda t=t: t.t().to(dtype).contiguous()))
        else:
            out.append((name, tuple(t.shape), lambda t=t: t.to(dtype).contiguous()))
    if not args.bias:  # transformers' GPT-2 always has biases: zeros compute the same
        shapes = _gpt2_shapes(args.n_layer, args.n_head, args.n_embd, args.block_size, args.vocab_size)
        out += [(name, shape, lambda shape=shape: torch.zeros(shape, dtype=dtype))
                for name, shape in shapes.items() if name.endswith(".bias")]
    return out


def _llama_tensors(weights, args, rows, dtype):
    """[(name, shape, make)] in LlamaForCausalLM's layout, as _hf_tensors makes GPT-2's: the fused c_attn's
    rows (and its bias's) are the queries, keys and values in turn; the embedding and the head lose their
    padding rows."""
    C = args.n_embd
    out = []
    for name, t in weights.items():
        block, _, rest = name.removeprefix("transformer.h.").partition(".")
        if name == "lm_head.weight" and args.tie_embeddings:  # the embedding itself
            continue
        if name in ("transformer.wte.weight", "lm_head.weight"):
            hf_name = "model.embed_tokens.weight" if name.startswith("transformer") else name
            out.append((hf_name, (rows, C), lambda t=t: t[:rows].to(dtype).contiguous()))
        elif name == "transformer.ln_f.weight":
            out.append(("model.norm.weight", (C,), lambda t=t: t.to(dtype).contiguous()))
        elif rest in ("attn.c_attn.weight", "attn.c_attn.bias"):
            kind = rest.rpartition(".")[2]
            out += [(f"model.layers.{block}.self_attn.{proj}.{kind}", (C, C)[:t.dim()],
                     lambda t=t, j=j: t[j * C:(j + 1) * C].to(dtype).contiguous())
                    for j, proj in enumerate(("q_proj", "k_proj", "v_proj"))]
        else:
            out.append((f"model.layers.{block}.{LLAMA_NAMES[rest]}", tuple(t.shape),
                        lambda t=t: t.to(dtype).contiguous()))
    return out


def _qwen3_tensors(weights, args, rows, dtype):
    """[(name, shape, make)] in Qwen3ForCausalLM's layout: Llama's, plus each layer's q_norm and k_norm gains at
    ones, since model.py's QK-norm has no gain (the same eps, and before RoPE in both)."""
    head_size = args.n_embd // args.n_head
    gains = [(f"model.layers.{block}.self_attn.{norm}.weight", (head_size,), lambda: torch.ones(head_size, dtype=dtype))
             for block in range(args.n_layer) for norm in ("q_norm", "k_norm")]
    return _llama_tensors(weights, args, rows, dtype) + gains


def _write_tensors(tensors, folder, dtype):
    """model.safetensors, or model-0000k-of-0000n.safetensors and an index past SHARD_BYTES."""
    from safetensors.torch import save_file
    itemsize = torch.empty((), dtype=dtype).element_size()
    shards, size = [[]], 0
    for name, shape, make in tensors:
        nbytes = itemsize * torch.Size(shape).numel()
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append((name, make))
        size += nbytes
    files = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)])
    for file, shard in zip(files, shards):
        save_file({name: make() for name, make in shard}, os.path.join(folder, file), metadata={"format": "pt"})
    if len(shards) > 1:
        weight_map = {name: file for file, shard in zip(files, shards) for name, _ in shard}
        total = sum(itemsize * torch.Size(shape).numel() for _, shape, _ in tensors)
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return len(shards)


def _write_tokenizer(encoding, folder):
    """tokenizer.json and tokenizer_config.json built offline from the encoding's BPE ranks, so that
    AutoTokenizer encodes ordinary text exactly as tiktoken does."""
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter
    ranks = os.path.join(folder, "ranks.tiktoken")
    encoding.write_ranks(ranks)
    eot = encoding.decode([encoding.eot_token])
    converted = TikTokenConverter(vocab_file=ranks, pattern=encoding.pattern, extra_special_tokens=[eot]).converted()
    os.remove(ranks)
    PreTrainedTokenizerFast(tokenizer_object=converted, bos_token=eot, eos_token=eot,
                            unk_token=eot).save_pretrained(folder)
