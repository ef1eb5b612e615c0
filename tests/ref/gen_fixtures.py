#!/usr/bin/python3
"""Generate additional Mega fixture cases with the own reference implementation (mega_ref.py,
written from the Mega paper, arXiv 2209.10655, and the official facebookresearch/mega code; see
docs/mega.md).

Usage: /usr/bin/python3 tests/ref/gen_fixtures.py [--out tests/fixtures/generated] [--case NAME ...] [--list]

The format, the inputs and the self-checks every case passes before it is written are those of
case_writer.py (the format of the official cases in tests/fixtures/official). This file adds the
Mega cases, the perturbation rules of the official parameter names, the notes, and two checks of
its own: a causal layer or LM streams in chunk-sized multi-token steps as well as one token at a
time, and a ragged case's padded route (stored) equals the native shorter-last-chunk route at
every position, for outputs, dx and every gradient, in float64.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import case_writer as cw  # noqa: E402
import check_shared  # noqa: E402
import mega_ref  # noqa: E402

# stored in the committed cases (case.json "generator"): kept verbatim
GENERATOR = "tests/ref/gen_fixtures.py (own PyTorch implementation of Mega from the paper and the official code, docs/mega.md)"


# ----------------------------------------------------------------------------------------------
# case definitions


def layer_cfg(**kw):
    cfg = dict(embed_dim=16, zdim=8, hdim=32, ndim=4, ffn_hidden_dim=32, chunk_size=8,
               attention_activation="softmax", bidirectional=False, norm_type="layernorm", prenorm=True,
               rel_pos_bias="simple", max_positions=64, truncation=None, activation="silu")
    cfg.update(kw)
    return cfg


def lm_cfg(**kw):
    cfg = dict(decoder_layers=2, decoder_embed_dim=16, decoder_z_dim=8, decoder_hidden_dim=32, decoder_n_dim=4,
               decoder_ffn_embed_dim=32, decoder_chunk_size=8, attention_activation_fn="softmax",
               normalization_type="layernorm", normalize_before=True, rel_pos_bias="simple",
               truncation_length=None, max_target_positions=64, activation_fn="silu", no_scale_embedding=False,
               share_decoder_input_output_embed=False, no_affine_final_norm=False, vocab_size=32, padding_idx=None)
    cfg.update(kw)
    return cfg


def cls_cfg(**kw):
    cfg = dict(encoder_layers=2, encoder_embed_dim=16, encoder_z_dim=8, encoder_hidden_dim=32, encoder_n_dim=4,
               encoder_ffn_embed_dim=32, encoder_chunk_size=8, attention_activation_fn="softmax",
               normalization_type="layernorm", normalize_before=True, rel_pos_bias="simple",
               truncation_length=None, max_positions=64, activation_fn="silu", embedding_type="sparse",
               sen_rep_type="mp", classifier_layers=1, classifier_out_dim=24, classifier_activation_fn="gelu",
               sentence_class_num=3, vocab_size=20, padding_idx=1)
    cfg.update(kw)
    return cfg


# (the names, configs and notes are stored in the committed cases: kept verbatim)
CASES = [
    dict(name="layer_causal_relu2_rotary_layernorm_post_c8_ragged_L29", kind="layer", dtype="float32", seed=1101,
         L=29, config=layer_cfg(attention_activation="relu2", rel_pos_bias="rotary", prenorm=False),
         notes=["causal block, relu2 (divided by the causal key count i+1), rotary rel-pos, layernorm, post-norm, "
                "chunk 8 with L=29: ragged last chunk of 5 (EXTENSION, see below), streaming decode across chunk "
                "borders into the short last chunk"]),
    dict(name="layer_causal_softmax_rotary_rmsnorm_pre_c8_ragged_L21_f64", kind="layer", dtype="float64", seed=1102,
         L=21, config=layer_cfg(rel_pos_bias="rotary", norm_type="rmsnorm", hdim=24, zdim=6, ndim=3),
         notes=["causal block, softmax, rotary rel-pos (zdim 6), rmsnorm, pre-norm, chunk 8 with L=21: ragged last "
                "chunk of 5 (EXTENSION), hdim 24, ndim 3, float64, streaming decode"]),
    dict(name="layer_causal_laplace_rotary_layernorm_post_full_gelu_f64", kind="layer", dtype="float64", seed=1103,
         L=24, config=layer_cfg(attention_activation="laplace", rel_pos_bias="rotary", prenorm=False, chunk_size=-1,
                                max_positions=32, activation="gelu"),
         notes=["causal block, laplace (divided by the causal key count), rotary rel-pos, layernorm, post-norm, "
                "full attention (chunk -1, 24 x 24 causal mask), gelu activation (exact erf form), float64, "
                "streaming decode"]),
    dict(name="layer_causal_softmax_simple_batchnorm_pre_c8", kind="layer", dtype="float32", seed=1104,
         L=32, config=layer_cfg(norm_type="batchnorm"),
         notes=["causal block, softmax, simple rel-pos, batchnorm, pre-norm, chunk 8 (training-mode batch statistics "
                "over all B*L positions; eval.out with the running statistics; buffer_after.*)",
                "no decode.out: the incremental path only runs in eval mode, where batchnorm uses running statistics, "
                "so it cannot reproduce the training-mode out (the generator checked that streaming in eval mode "
                "reproduces eval.out)"]),
    dict(name="layer_causal_relu2_simple_scalenorm_pre_noffn_relu", kind="layer", dtype="float32", seed=1105,
         L=24, config=layer_cfg(attention_activation="relu2", norm_type="scalenorm", ffn_hidden_dim=0,
                                chunk_size=-1, max_positions=24, activation="relu"),
         notes=["causal block without NFFN (ffn_hidden_dim 0), relu2, simple rel-pos with max_positions = L = 24 "
                "(full attention uses the whole 2*24-1 table), scalenorm, pre-norm, relu activation (v, h), "
                "streaming decode"]),
    dict(name="layer_bidir_softmax_rotary_batchnorm_pre_c8_pad", kind="layer", dtype="float32", seed=1106,
         L=32, lengths=[32, 26], config=layer_cfg(bidirectional=True, rel_pos_bias="rotary", norm_type="batchnorm"),
         notes=["bidirectional block, softmax, rotary rel-pos, batchnorm, pre-norm, chunk 8, right padding (row 1: "
                "last chunk partly padding); batch statistics include padded positions; eval.out; buffer_after.*"]),
    dict(name="layer_bidir_relu2_rotary_scalenorm_pre_full_trunc5_f64_pad", kind="layer", dtype="float64",
         seed=1107, L=32, lengths=[23, 32],
         config=layer_cfg(bidirectional=True, attention_activation="relu2", rel_pos_bias="rotary",
                          norm_type="scalenorm", chunk_size=-1, max_positions=32, truncation=5, hdim=24,
                          ffn_hidden_dim=24),
         notes=["bidirectional block, relu2 (divided by the non-pad key count), rotary, scalenorm, pre-norm, full "
                "attention, EMA kernel truncated to 5 taps in both directions, padding in row 0, hdim = F = 24, float64"]),
    dict(name="layer_bidir_laplace_simple_layernorm_post_c8_ragged_L28_pad", kind="layer", dtype="float32",
         seed=1108, L=28, lengths=[28, 19],
         config=layer_cfg(bidirectional=True, attention_activation="laplace", prenorm=False),
         notes=["bidirectional block, laplace (divided by the non-pad key count, clamped to >= 1), simple rel-pos, "
                "layernorm, post-norm, chunk 8 with L=28: ragged last chunk of 4 (EXTENSION); right padding, "
                "row 1 (length 19): its short last chunk is entirely padding (weights 0, divisor clamped to 1)"]),
    dict(name="layer_bidir_softmax_simple_rmsnorm_post_c8_allpad_chunk", kind="layer", dtype="float32", seed=1109,
         L=32, lengths=[32, 13], config=layer_cfg(bidirectional=True, norm_type="rmsnorm", prenorm=False),
         notes=["bidirectional block, softmax, simple rel-pos, rmsnorm, post-norm, chunk 8; row 1 has length 13: "
                "chunk 1 is partly padding and chunks 2 and 3 are entirely padding, where the official rule "
                "'all keys of the chunk are padding -> nothing is masked' applies (those queries attend to all 8 "
                "keys of their chunk)"]),
    dict(name="layer_causal_softmax_simple_layernorm_pre_c8_trunc40", kind="layer", dtype="float32", seed=1110,
         L=32, config=layer_cfg(truncation=40),
         notes=["causal block, softmax, simple rel-pos, layernorm, pre-norm, chunk 8, EMA truncation 40 >= L = 32 "
                "(so the kernel uses min(40, L) = 32 taps and the untruncated incremental path is still exact), "
                "streaming decode"]),
    dict(name="lm_softmax_rotary_layernorm_pre_c8_L24_untied", kind="lm", dtype="float32", seed=1201, L=24,
         config=lm_cfg(rel_pos_bias="rotary", padding_idx=1, decoder_hidden_dim=24, decoder_ffn_embed_dim=24,
                       vocab_size=24),
         notes=["2-layer causal LM, softmax, rotary, layernorm, pre-norm + affine final norm, chunk 8 with L=24 "
                "(3 chunks), E=F=24, V=24, scaled embedding, untied output projection, padding_idx 1 (never used: its embedding "
                "row gets a zero gradient), decode.logits",
                "layernorm instead of the batchnorm first asked for: a batchnorm LM's streaming decode (eval mode, "
                "running statistics) cannot reproduce the training-mode logits"]),
    dict(name="lm_laplace_simple_rmsnorm_post_full_L20_f64", kind="lm", dtype="float64", seed=1202, L=20,
         config=lm_cfg(decoder_embed_dim=12, decoder_z_dim=6, decoder_hidden_dim=16, decoder_n_dim=3,
                       decoder_ffn_embed_dim=12, decoder_chunk_size=-1, attention_activation_fn="laplace",
                       normalization_type="rmsnorm", normalize_before=False, max_target_positions=32,
                       vocab_size=20),
         notes=["2-layer post-norm LM (no final norm), laplace, simple rel-pos (2*32-1 table), rmsnorm, full "
                "attention (chunk -1), D=12 Z=6 E=16 N=3 F=12, V=20, float64, decode.logits"]),
    dict(name="cls_sparse_pad_cls_head2_rmsnorm_post_c8_L30", kind="cls", dtype="float32", seed=1303, L=30,
         lengths=[30, 17],
         config=cls_cfg(normalization_type="rmsnorm", normalize_before=False, sen_rep_type="cls",
                        classifier_layers=2, classifier_out_dim=20, classifier_activation_fn="relu",
                        encoder_hidden_dim=24, encoder_ffn_embed_dim=24,
                        attention_activation_fn="relu2", rel_pos_bias="rotary", sentence_class_num=4),
         notes=["LRA classifier, token embedding, right padding (lengths 30/17), cls pooling (position 0), 2 hidden "
                "head layers (relu), relu2, rotary, rmsnorm post-norm (no final norm), chunk 8 with L=30 (encoder "
                "right-pads to 32 with padding_idx; row 1's last chunk is entirely padding)"]),
    dict(name="cls_sparse_pad_mp_batchnorm_pre_c8_L32", kind="cls", dtype="float32", seed=1302, L=32,
         lengths=[32, 21],
         config=cls_cfg(normalization_type="batchnorm", attention_activation_fn="laplace", truncation_length=16,
                        classifier_out_dim=16, encoder_hidden_dim=24, encoder_ffn_embed_dim=24),
         expected_noise=["encoder.encoder.layers.1.nffn.fc2.bias"],
         notes=["LRA classifier, token embedding, right padding (lengths 32/21), mean pooling, 1 hidden head layer "
                "(gelu), laplace, simple rel-pos, batchnorm pre-norm + batchnorm final norm (batch statistics "
                "include padded positions), chunk 8, EMA truncation 16 < L; eval.logits with the running "
                "statistics; buffer_after.*",
                "the last layer's nffn.fc2.bias adds a per-channel constant right before the training-mode "
                "batchnorm final norm, so its gradient is exactly 0 (noise_gradients)"]),
]

COMMON_NOTES = {
    "train": "training mode, every dropout 0; weights are the reference initialisation (torch.manual_seed(seed)) "
             "perturbed so that no parameter keeps a trivial value (0, 1, std 0.02); they are arbitrary test values",
    "float32": "float32: EMA convolution by FFT in float32, attention softmax in float32, rotary sin/cos tables in "
               "float32 (as the official code); the generator checked that float64 differs by < 5e-5 of each "
               "tensor's largest magnitude",
    "float64": "float64: every operation in float64 (the official float32 casts lifted, as in the shared cases)",
    "gelu32": "gelu: its float32 backward was computed on a contiguous copy of the incoming gradient (same kernel; "
              "works around a torch 1.13 CPU bug, see the shared README)",
    "layer_loss": "loss = sum(out * dout); dx and grad.* are its gradients",
    "causal": "causal: MegaDecoderLayer semantics (no cross-attention) with the official future mask: additive -inf "
              "above the diagonal for softmax, multiplicative lower-triangular ones for relu2/laplace, chunk x chunk "
              "per chunk (L x L for full attention)",
    "bidir": "bidirectional: MegaSentenceEncoderLayer semantics, bidirectional EMA (2D kernel rows), no causal mask",
    "decode": "decode.out: same x fed one position at a time through the incremental path (eval mode, no mask): "
              "untruncated EMA state carried, cached keys/values reset at every chunk border",
    "pad": "right padding: true lengths {lengths}; padding_mask 1 = pad; x is random also at padded positions and "
           "out/dx there are part of the reference",
    "batchnorm": "batchnorm: batch statistics over all B*L positions, padded ones included; buffer_after.* = "
                 "running statistics after this one training forward (momentum 0.1, unbiased variance); "
                 "eval.out/eval.logits use the running statistics stored in weights.safetensors",
    "ragged": "EXTENSION (not accepted by the official layer, which needs L % chunk == 0): ragged L={L}, chunk {c}. "
              "Semantics = what the official LM/LRA wrappers do with pad tokens: right-pad x with zeros to {Lp}, "
              "mark the added tail in the padding mask, run the layer, drop the tail. This equals a shorter last "
              "chunk of {r} (checked by the generator at every position in float64).",
    "lm_loss": "loss = mean cross-entropy over all B*L positions",
    "cls_loss": "loss = mean cross-entropy over the batch",
    "cls_tokens": "tokens are right-padded with padding_idx beyond lengths {lengths}",
    "cls_ragged": "ragged: L={L} is not a multiple of chunk {c}, the encoder right-pads the tokens with padding_idx "
                  "to {Lp} (official MegaLRAEncoder behaviour)",
}


# ----------------------------------------------------------------------------------------------
# weights


def _ema(p, leaf, d):
    """EMA: delta, alpha N(0, 1) (official init std 0.2); beta + N(0, 0.05); gamma / omega: the
    official N(0, 1) kept"""
    if leaf in ("delta", "alpha"):
        return d.n(p) * 1.0
    return p + d.n(p) * 0.05 if leaf == "beta" else None


RULES = [
    (lambda name, leaf, p: ".move." in "." + name, _ema),
    cw.NORM,
    (lambda name, leaf, p: leaf == "rel_pos_bias" or name.endswith(("rel_pos_bias.alpha", "rel_pos_bias.beta")),
     lambda p, leaf, d: d.n(p) * 0.3),
    (cw.ends("mega_layer.gamma"), lambda p, leaf, d: d.n(p) * 1.0),
    (cw.ends("mega_layer.beta"), lambda p, leaf, d: d.n(p) * 0.3),
    (cw.ends("embed_tokens.bias"), lambda p, leaf, d: p + d.n(p) * 0.1),
    # token tables: official N(0, D^-1/2), real-number weight N(0, 1): kept
    (lambda name, leaf, p: "embed_tokens" in name, lambda p, leaf, d: None),
    cw.MATRIX,
    cw.BIAS,
]


def zero_padding_row(model, spec):
    """the official LM Embedding initialises the padding_idx row to 0"""
    if spec["kind"] == "lm" and spec["config"].get("padding_idx") is not None:
        with torch.no_grad():
            model.decoder.embed_tokens.weight[spec["config"]["padding_idx"]].zero_()


# ----------------------------------------------------------------------------------------------
# checks


def chunk_splits(spec):
    """multi-token streaming in chunk-sized pieces (an uneven split for full attention)"""
    cfg, L = spec["config"], spec["L"]
    c = cfg["chunk_size"] if spec["kind"] == "layer" else cfg["decoder_chunk_size"]
    return [list(range(0, L, c)) + [L] if c > 0 else [0, 5, 6, 13, L]]


def ragged_check(spec, W, io):
    """Padded route (stored) vs native shorter-last-chunk route, float64, every position."""
    W64 = cw.f64(W)
    a = check_shared.run_reference("layer", spec["config"], torch.float64, W64, io)
    b = check_shared.run_reference("layer", spec["config"], torch.float64, W64, io, ragged_mode="native")
    return max(cw.rel_err(b[k], a[k]) for k in a if a[k].is_floating_point())


def extra_checks(spec, W, io):
    ragged, _ = is_ragged(spec)
    norm = spec["config"].get("norm_type", spec["config"].get("normalization_type"))
    if not (ragged and spec["kind"] == "layer"):
        return {}
    if norm == "batchnorm":
        raise ValueError("ragged + batchnorm layer cases are not generated (not equivalent to a short chunk)")
    e = ragged_check(spec, W, io)
    if e > 1e-12:
        raise RuntimeError(f"{spec['name']}: ragged routes differ {e:.2e}")
    return {"ragged_pad_vs_native": e}


# ----------------------------------------------------------------------------------------------
# writing


def is_ragged(spec):
    cfg, L = spec["config"], spec["L"]
    c = cfg.get("chunk_size", cfg.get("decoder_chunk_size", cfg.get("encoder_chunk_size")))
    return 0 < c < L and L % c != 0, c


def build_notes(spec, noise):
    kind, cfg, L = spec["kind"], spec["config"], spec["L"]
    notes = list(spec["notes"][:1])
    notes.append(COMMON_NOTES["train"])
    notes.append(COMMON_NOTES[spec["dtype"]])
    acts = {cfg.get("activation"), cfg.get("activation_fn"), cfg.get("classifier_activation_fn")}
    if spec["dtype"] == "float32" and "gelu" in acts:
        notes.append(COMMON_NOTES["gelu32"])
    ragged, c = is_ragged(spec)
    Lp = -(-L // c) * c if ragged else L
    if kind == "layer":
        notes.append(COMMON_NOTES["layer_loss"])
        notes.append(COMMON_NOTES["bidir" if cfg["bidirectional"] else "causal"])
        if spec.get("lengths") is not None:
            notes.append(COMMON_NOTES["pad"].format(lengths=spec["lengths"]))
        if ragged:
            notes.append(COMMON_NOTES["ragged"].format(L=L, c=c, Lp=Lp, r=L - (Lp - c)))
        if not cfg["bidirectional"] and cfg["norm_type"] != "batchnorm":
            notes.append(COMMON_NOTES["decode"])
    elif kind == "lm":
        notes.append(COMMON_NOTES["lm_loss"])
    else:
        notes.append(COMMON_NOTES["cls_loss"])
        if spec.get("lengths") is not None and cfg["embedding_type"] == "sparse":
            notes.append(COMMON_NOTES["cls_tokens"].format(lengths=spec["lengths"]))
        if ragged:
            notes.append(COMMON_NOTES["cls_ragged"].format(L=L, c=c, Lp=Lp))
    if cfg.get("norm_type", cfg.get("normalization_type")) == "batchnorm":
        notes.append(COMMON_NOTES["batchnorm"])
    notes.extend(spec["notes"][1:])
    if noise:
        notes.append(cw.noise_note(noise))
    return notes


REFERENCE = cw.Reference(
    GENERATOR, mega_ref.build, RULES, build_notes,
    default_out=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "generated"),
    splits=chunk_splits, prepare=zero_padding_row, extra_checks=extra_checks)

if __name__ == "__main__":
    sys.exit(cw.main(REFERENCE, CASES))
