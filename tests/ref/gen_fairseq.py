#!/usr/bin/python3
"""Official-format fairseq checkpoints for the converter's tests (tests/fixtures/fairseq/).

Usage: /usr/bin/python3 tests/ref/gen_fairseq.py [--out DIR] [--repo GIT_DIR]

Builds, with the OFFICIAL Mega modules (read from the git mirror of facebookresearch/mega at run
time, as check_official.py does: MovingAverageGatedAttention, NormalizedFeedForwardNetwork,
SequenceNorm, and fairseq/logging/meters.py), a small enwik8-style byte language model with random
weights, glued as the official MegaDecoderNoCrossAttn (fairseq/models/mega_lm.py): embedding times
sqrt(D), padding to a multiple of the chunk with <pad>, the layers with the future mask, the final
norm, the output projection. It writes, per case directory:

  model.pt              the checkpoint_utils.save_state layout: {"args": argparse.Namespace,
                        "model": state dict (official names, decoder.version included),
                        "optimizer_history": [...], "extra_state": {... an official meters object ...}}
                        -- the meters object makes the converter's fairseq-free loading necessary
  dict.txt              a fairseq dictionary of decimal byte tokens (counts decreasing)
  expected.safetensors  tokens [2, L] (int32) and the official logits [2, L, V] (eval mode)
  eval.txt, eval.json   a text and what fairseq_cli/eval_mega_lm.py reports on it (below)

eval.json: the token stream is fairseq-preprocess's (each line's bytes as tokens, then </s>, the last
line's too); fairseq's language-modeling task cuts it into blocks of tokens_per_sample
(TokenBlockDataset, break mode "none": inputs = the stream shifted right, </s> first; every token
is a target), and eval_mega_lm.py runs each block from an empty incremental state in pieces of
decoder_chunk_size * chunk_nums tokens. With whole chunks per piece the incremental path computes
the causal chunked forward of the block, so here each block is one official forward (padded to a
whole chunk as the decoder pads). Reported: count, nll_sum (nats), loss_base2 = nll_sum / count /
ln 2.

It also writes two word-level LMs with the official AdaptiveInput / AdaptiveSoftmax (word_lm/,
word_lm_untied/: expected log-probabilities and the official evaluation of a text, as byte_lm), and
a translation checkpoint (mt/) from the official MegaModel case in tests/fixtures/s2s/ (mt() below).

It also builds a small ListOps classifier in the official LRA format (lra_cls/: model.pt with the
arguments of the `lra` model, `mega_lra_listop` architecture, dict.txt, label_dict.txt, the lines of
text.txt, and expected.safetensors: the ids the official lra-text task gives those lines, their
lengths and the official logits), glued as LRAModel + MegaLRAEncoder compute (OfficialLRA below).

Deterministic: regenerating gives byte-identical files except model.pt (torch.save's zip member
timestamps).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_official as co  # noqa: E402  (import_official, OffBlock, run_stack)
import st  # noqa: E402

REPO = "/work/.mirror/facebookresearch+mega/repo"

EVAL_TEXT = (b"the mega model reads bytes.\n"
             b"each line ends with </s> in the official data;\n"
             b"\n"
             b"a blank line is a lone </s>, and the last line\n"
             b"has no newline at its end but still gets one: (12+34)=46 [ok]")


class OfficialLM(nn.Module):
    """MegaDecoderNoCrossAttn's computation from the official layers, under the official names;
    with a.adaptive_input / a.adaptive_softmax_cutoff the official AdaptiveInput / AdaptiveSoftmax
    modules (fairseq/modules/adaptive_*.py) built as the official build_model and decoder build them,
    and the output is AdaptiveSoftmax.get_log_prob (what the model's get_normalized_probs returns)"""

    def __init__(self, O, a, V):
        super().__init__()
        self.a = a
        D = a.decoder_embed_dim
        lk = dict(embed_dim=D, zdim=a.decoder_z_dim, hdim=a.decoder_hidden_dim, ndim=a.decoder_n_dim,
                  ffn_hidden_dim=a.decoder_ffn_embed_dim, chunk_size=a.decoder_chunk_size,
                  attention_activation=a.attention_activation_fn, bidirectional=False,
                  norm_type=a.normalization_type, prenorm=a.normalize_before, rel_pos_bias=a.rel_pos_bias,
                  max_positions=a.max_target_positions, truncation=a.truncation_length, activation=a.activation_fn)
        self.decoder = nn.Module()
        cut = lambda s: [int(x) for x in s.split(",")]  # options.eval_str_list
        if a.adaptive_input:
            from fairseq.modules.adaptive_input import AdaptiveInput  # the official module, from the temp dir
            self.decoder.embed_tokens = AdaptiveInput(V, 1, a.decoder_input_dim, a.adaptive_input_factor, D,
                                                      cut(a.adaptive_input_cutoff))
        else:
            self.decoder.embed_tokens = nn.Embedding(V, D, padding_idx=1)
            nn.init.normal_(self.decoder.embed_tokens.weight, 0, D ** -0.5)
            with torch.no_grad():
                self.decoder.embed_tokens.weight[1].zero_()
        self.decoder.layers = nn.ModuleList([co.OffBlock(O, lk) for _ in range(a.decoder_layers)])
        self.decoder.final_norm = O[2](a.normalization_type, D) if a.normalize_before else None
        if a.adaptive_softmax_cutoff is not None:
            from fairseq.modules.adaptive_softmax import AdaptiveSoftmax
            self.decoder.adaptive_softmax = AdaptiveSoftmax(
                V, D, cut(a.adaptive_softmax_cutoff), dropout=a.adaptive_softmax_dropout,
                adaptive_inputs=self.decoder.embed_tokens if a.tie_adaptive_weights else None,
                factor=a.adaptive_softmax_factor, tie_proj=a.tie_adaptive_proj)
        else:
            self.decoder.output_projection = nn.Linear(D, V, bias=False)
            nn.init.normal_(self.decoder.output_projection.weight, 0, D ** -0.5)
        self.decoder.register_buffer("version", torch.Tensor([3]))

    def forward(self, tok):
        c, L = self.a.decoder_chunk_size, tok.size(1)
        t = F.pad(tok, (0, -L % c), value=1) if 0 < c < L and L % c else tok
        x = math.sqrt(self.a.decoder_embed_dim) * self.decoder.embed_tokens(t)
        pad = t.eq(1)
        x, _ = co.run_stack(self.decoder.layers, self.decoder.final_norm, x, pad if pad.any() else None)
        x = x[:L].transpose(0, 1)
        if self.a.adaptive_softmax_cutoff is not None:
            return self.decoder.adaptive_softmax.get_log_prob(x, None)
        return self.decoder.output_projection(x)


def byte_lm(O, out):
    torch.manual_seed(2024)
    # the bytes of the text and a few more, by decreasing (made-up) frequency: 4 + 45 tokens -> 56 rows
    used = sorted(set(EVAL_TEXT) - {10})
    extra = [b for b in range(33, 127) if b not in used][: 45 - len(used)]
    byte_tokens = used + extra
    counts = [1000 - 7 * i for i in range(len(byte_tokens))]
    V = 4 + len(byte_tokens)
    V += -V % 8  # Dictionary.pad_to_multiple_(8): madeupword fillers
    a = __import__("argparse").Namespace(
        arch="mega_lm_enwik8_base", task="language_modeling", tokens_per_sample=48, decoder_layers=2,
        decoder_embed_dim=16, decoder_hidden_dim=32, decoder_ffn_embed_dim=24, decoder_z_dim=8, decoder_n_dim=4,
        decoder_chunk_size=8, decoder_input_dim=16, truncation_length=None, max_target_positions=64,
        attention_activation_fn="softmax", rel_pos_bias="simple", normalization_type="layernorm",
        normalize_before=True, normalize_embedding=False, no_scale_embedding=False, no_affine_final_norm=False,
        share_decoder_input_output_embed=False, activation_fn="silu", dropout=0.1, attention_dropout=0.0,
        hidden_dropout=0.0, adaptive_input=False, adaptive_softmax_cutoff=None, seed=1)
    m = OfficialLM(O, a, V).eval()
    from fairseq.logging import meters  # the official module, from the temp dir
    wps = meters.TimeMeter()
    loss = meters.AverageMeter()
    loss.update(1.234)
    ck = {"args": a, "model": m.state_dict(), "optimizer_history": [{"criterion_name": "CrossEntropyCriterion",
                                                                      "optimizer_name": "FairseqAdam",
                                                                      "lr_scheduler_state": {"best": 1.5},
                                                                      "num_updates": 10}],
          "extra_state": {"epoch": 1, "train_iterator": {"epoch": 1}, "metrics": {"wps": wps, "loss": loss}},
          "last_optimizer_state": None}
    d = os.path.join(out, "byte_lm")
    os.makedirs(d, exist_ok=True)
    torch.save(ck, os.path.join(d, "model.pt"))
    with open(os.path.join(d, "dict.txt"), "w") as f:
        for b, c in zip(byte_tokens, counts):
            f.write(f"{b} {c}\n")
    # logits of two random sequences (pads excluded: ids 4..V-1 that are real tokens)
    g = torch.Generator().manual_seed(7)
    tok = torch.randint(4, 4 + len(byte_tokens), (2, 21), generator=g)
    tok[0, 0] = 2  # </s>, as the first input of a block
    with torch.no_grad():
        logits = m(tok)
    st.save(os.path.join(d, "expected.safetensors"),
            {"tokens": tok.numpy().astype(np.int32), "logits": logits.numpy().astype(np.float32)},
            {"generator": "tests/ref/gen_fairseq.py (official Mega modules, facebookresearch/mega)"})
    # the official evaluation of EVAL_TEXT
    ids = {b: 4 + i for i, b in enumerate(byte_tokens)}
    stream = []
    for line in EVAL_TEXT.split(b"\n"):
        stream += [ids.get(c, 3) for c in line] + [2]
    src = [2] + stream[:-1]
    nll, n = 0.0, len(stream)
    for s in range(0, n, a.tokens_per_sample):
        e = min(n, s + a.tokens_per_sample)
        with torch.no_grad():
            lg = m(torch.tensor([src[s:e]])).double()[0]
        nll += float(F.cross_entropy(lg, torch.tensor(stream[s:e]), reduction="sum"))
    open(os.path.join(d, "eval.txt"), "wb").write(EVAL_TEXT)
    json.dump({"tokens_per_sample": a.tokens_per_sample, "count": n, "nll_sum": nll,
               "loss_base2": nll / n / math.log(2), "blocks": -(-n // a.tokens_per_sample)},
              open(os.path.join(d, "eval.json"), "w"), indent=1)
    print(f"{d}: V {V} ({len(byte_tokens)} byte tokens), eval {n} tokens, {nll / n / math.log(2):.6f} bits/token")


WORD_TEXT = ("the model reads words and the words have bands\n"
             "a rare word is in a small band ; the frequent words are in the head\n"
             "\n"
             "unknown words like zyzzyva become <unk> and the last line gets a newline too")


def word_lm(O, out, name, tied):
    """a word-level LM with adaptive input and adaptive softmax, as mega_lm_wiki103 (tied weights
    and projections, factor 4) or untied (an own embedding table, an adaptive softmax with its
    own head and tails, dropout 0.2 in training)"""
    torch.manual_seed(2026 + tied)
    words = sorted(set(WORD_TEXT.split()) - {"zyzzyva"}, key=lambda w: (-WORD_TEXT.count(w), w))
    words += ["w%02d" % i for i in range(60 - len(words))]
    counts = [5000 // (i + 1) for i in range(len(words))]
    V = 4 + len(words)
    V += -V % 8
    a = __import__("argparse").Namespace(
        arch="mega_lm_wiki103" if tied else "mega_lm_adaptive_base", task="language_modeling", tokens_per_sample=24,
        decoder_layers=2, decoder_embed_dim=32, decoder_hidden_dim=48, decoder_ffn_embed_dim=40, decoder_z_dim=8,
        decoder_n_dim=4, decoder_chunk_size=8, decoder_input_dim=32, truncation_length=None, max_target_positions=64,
        attention_activation_fn="softmax", rel_pos_bias="simple", normalization_type="layernorm",
        normalize_before=True, normalize_embedding=False, no_scale_embedding=False, no_affine_final_norm=False,
        share_decoder_input_output_embed=False, activation_fn="silu", dropout=0.3, attention_dropout=0.1,
        hidden_dropout=0.1, adaptive_input=tied, adaptive_input_factor=4,
        adaptive_input_cutoff="12,30" if tied else None, adaptive_softmax_cutoff="12,30" if tied else "20",
        adaptive_softmax_factor=4 if tied else 2, adaptive_softmax_dropout=0.2, tie_adaptive_weights=tied,
        tie_adaptive_proj=tied, seed=1)
    m = OfficialLM(O, a, V).eval()
    ck = {"args": a, "model": m.state_dict(), "optimizer_history": [{"criterion_name": "AdaptiveLoss",
                                                                      "optimizer_name": "FairseqNAG",
                                                                      "lr_scheduler_state": {"best": 3.0},
                                                                      "num_updates": 10}],
          "extra_state": {"epoch": 1, "train_iterator": {"epoch": 1}}, "last_optimizer_state": None}
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    torch.save(ck, os.path.join(d, "model.pt"))
    with open(os.path.join(d, "dict.txt"), "w") as f:
        for w, c in zip(words, counts):
            f.write(f"{w} {c}\n")
    g = torch.Generator().manual_seed(8)
    tok = torch.randint(4, 4 + len(words), (2, 19), generator=g)
    tok[0, 0] = 2
    with torch.no_grad():
        logp = m(tok)
    st.save(os.path.join(d, "expected.safetensors"),
            {"tokens": tok.numpy().astype(np.int32), "logits": logp.numpy().astype(np.float32)},
            {"generator": "tests/ref/gen_fairseq.py (official Mega modules, facebookresearch/mega)"})
    # the official evaluation: fairseq-preprocess's ids (whitespace words, <unk> 3, </s> per line),
    # blocks of tokens_per_sample, the adaptive softmax's log-probabilities of the targets
    ids = {w: 4 + i for i, w in enumerate(words)}
    stream = []
    for line in WORD_TEXT.split("\n"):
        stream += [ids.get(w, 3) for w in line.split()] + [2]
    src = [2] + stream[:-1]
    nll, n = 0.0, len(stream)
    for s_ in range(0, n, a.tokens_per_sample):
        e = min(n, s_ + a.tokens_per_sample)
        with torch.no_grad():
            lp = m(torch.tensor([src[s_:e]])).double()[0]
        nll -= float(lp[torch.arange(e - s_), torch.tensor(stream[s_:e])].sum())
    open(os.path.join(d, "eval.txt"), "w").write(WORD_TEXT)
    json.dump({"tokens_per_sample": a.tokens_per_sample, "count": n, "nll_sum": nll,
               "loss_base2": nll / n / math.log(2), "perplexity": math.exp(nll / n),
               "blocks": -(-n // a.tokens_per_sample)}, open(os.path.join(d, "eval.json"), "w"), indent=1)
    print(f"{d}: V {V} ({len(words)} words), eval {n} tokens, perplexity {math.exp(nll / n):.4f}")


class OfficialLRA(nn.Module):
    """LRAModel with MegaLRAEncoder (fairseq/models/lra/model.py, mega_lra_encoder.py) from the
    official layers, under the official state-dict names: encoder.encoder.{embed_tokens.embed,
    layers, final_norm}, classifier.<j>.0, sentence_projection_layer; the glue as
    check_official.py cls_case (and the official encoder): pad the tokens to a chunk multiple with
    <pad>, embed (no scale), pad rows zeroed, the bidirectional layers, the final norm (pre-norm),
    mean over the true length ("mp") or position 0 ("cls"), the head."""

    def __init__(self, O, a, V):
        super().__init__()
        self.a = a
        D = a.encoder_embed_dim
        lk = dict(embed_dim=D, zdim=a.z_dim, hdim=a.encoder_hidden_dim, ndim=a.n_dim,
                  ffn_hidden_dim=a.encoder_ffn_embed_dim, chunk_size=a.chunk_size,
                  attention_activation=a.attention_activation_fn, bidirectional=True, norm_type=a.norm_type,
                  prenorm=a.encoder_normalize_before, rel_pos_bias=a.rel_pos_bias, max_positions=a.max_positions,
                  truncation=a.truncation_length, activation=a.activation_fn)
        self.encoder = nn.Module()
        self.encoder.encoder = enc = nn.Module()
        enc.embed_tokens = nn.Module()
        enc.embed_tokens.embed = nn.Embedding(V, D, padding_idx=1)
        nn.init.normal_(enc.embed_tokens.embed.weight, 0, D ** -0.5)
        with torch.no_grad():
            enc.embed_tokens.embed.weight[1].zero_()
        enc.layers = nn.ModuleList([co.OffBlock(O, lk) for _ in range(a.encoder_layers)])
        enc.final_norm = O[2](a.norm_type, D) if a.encoder_normalize_before else None
        self.classifier = nn.ModuleList([nn.Sequential(nn.Linear(a.classifier_in_dim, a.classifier_out_dim),
                                                       nn.Dropout(a.dropout))])
        self.sentence_projection_layer = nn.Linear(a.classifier_out_dim, a.sentence_class_num, bias=False)

    def forward(self, tok, lengths):
        enc, c, L = self.encoder.encoder, self.a.chunk_size, tok.size(1)
        t = F.pad(tok, (0, -L % c), value=1) if 0 < c < L and L % c else tok
        pad = t.eq(1)
        x, _ = co.run_stack(enc.layers, enc.final_norm, enc.embed_tokens.embed(t), pad if pad.any() else None)
        rep = x.sum(0) / lengths.to(x.dtype).unsqueeze(1) if self.a.sen_rep_type == "mp" else x[0]
        for layer in self.classifier:
            rep = F.gelu(layer(rep))
        return self.sentence_projection_layer(rep)


# ListOps source lines as the official processed data has them: space-separated tokens
LRA_TEXT = ["[MAX 2 9 [MIN 4 7 ] 0 ]", "[SM 3 [MED 1 5 8 ] ]", "[MIN 6 ]", "[MED [SM 9 9 ] 2 [MAX 1 ] 7 ]",
            "[MAX 4 ( ??? ) ]"]


def lra_cls(O, out):
    torch.manual_seed(2025)
    tokens = ["]", "[MAX", "[MIN", "[SM", "[MED"] + [str(i) for i in range(10)] + ["(", ")"]
    counts = [900 - 11 * i for i in range(len(tokens))]
    labels = ["3", "0", "7", "1", "9", "2", "5", "4", "8", "6"]  # label-bin/dict.txt: by frequency
    V = 4 + len(tokens) + 1  # the task adds <CLS> after loading dict.txt
    a = __import__("argparse").Namespace(
        arch="mega_lra_listop", task="lra-text", input_type="text", layer_type="mega", encoder_layers=2,
        encoder_embed_dim=16, encoder_hidden_dim=32, encoder_ffn_embed_dim=24, z_dim=8, n_dim=4, chunk_size=8,
        truncation_length=None, max_positions=64, attention_activation_fn="softmax", rel_pos_bias="simple",
        norm_type="layernorm", encoder_normalize_before=True, normalize_embedding=False, feature_dropout=False,
        activation_fn="silu", sen_rep_type="mp", classifier_layers=1, classifier_out_dim=20,
        classifier_activation_fn="gelu", classifier_in_dim=16, sentence_class_num=10, use_p=False, dropout=0.1,
        attention_dropout=0.0, act_dropout=0.0, seed=1)
    m = OfficialLRA(O, a, V).eval()
    ck = {"args": a, "model": m.state_dict(), "optimizer_history": [{"criterion_name": "LRACrossEntropyCriterion",
                                                                      "optimizer_name": "FairseqAdam",
                                                                      "lr_scheduler_state": {"best": 0.5},
                                                                      "num_updates": 10}],
          "extra_state": {"epoch": 1, "train_iterator": {"epoch": 1}}, "last_optimizer_state": None}
    d = os.path.join(out, "lra_cls")
    os.makedirs(d, exist_ok=True)
    torch.save(ck, os.path.join(d, "model.pt"))
    with open(os.path.join(d, "dict.txt"), "w") as f:
        for t, c in zip(tokens, counts):
            f.write(f"{t} {c}\n")
    with open(os.path.join(d, "label_dict.txt"), "w") as f:
        for i, t in enumerate(labels):
            f.write(f"{t} {100 - i}\n")
    # the ids the official task gives each line: dict ids (unknown words -> <unk> 3), then </s>
    ids = {t: 4 + i for i, t in enumerate(tokens)}
    seqs = [[ids.get(w, 3) for w in line.split()] + [2] for line in LRA_TEXT]
    L = max(len(q) for q in seqs)
    tok = torch.full((len(seqs), L), 1, dtype=torch.long)
    for i, q in enumerate(seqs):
        tok[i, :len(q)] = torch.tensor(q)
    lengths = torch.tensor([len(q) for q in seqs])
    with torch.no_grad():
        logits = m(tok, lengths)
    st.save(os.path.join(d, "expected.safetensors"),
            {"tokens": tok.numpy().astype(np.int32), "lengths": lengths.numpy().astype(np.int32),
             "logits": logits.numpy().astype(np.float32)},
            {"generator": "tests/ref/gen_fairseq.py (official Mega modules, facebookresearch/mega)"})
    open(os.path.join(d, "text.txt"), "w").write("\n".join(LRA_TEXT) + "\n")
    print(f"{d}: V {V}, {len(seqs)} inputs of up to {L} tokens, {a.sentence_class_num} classes")


S2S_CASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "s2s",
                        "s2s_softmax_simple_layernorm_pre_encc8_ragged_sep")
MT_SRC = ["<en%02d>" % i for i in range(20)]  # a source dictionary of 20 tokens (V = 24)
# a target dictionary of 24 tokens (V = 28), every third a subword-nmt piece ("@@": joined to the next)
MT_TGT = ["de%02d@@" % i if i % 3 == 0 else "de%02d" % i for i in range(24)]


def mt(out, case=S2S_CASE):
    """a translation model (arch mega_wmt_en_de, task translation) in the checkpoint_utils layout,
    made from a reference case of the OFFICIAL MegaModel (fairseq/models/mega.py built by its own
    build_model; tests/fixtures/s2s/, whose weights and logits the official code produced): its weights
    under their official names with the decoder's buffers, its arguments as the Namespace, and two
    dictionaries (dict.en.txt, dict.de.txt) of the case's vocabulary sizes. expected.safetensors:
    the case's src_tokens, prev_output_tokens and official logits."""
    if not os.path.isdir(case):
        print(f"{case}: missing; the translation fixture is not regenerated")
        return
    cj = json.load(open(os.path.join(case, "case.json")))
    W, _ = st.load(os.path.join(case, "weights.safetensors"))
    io, _ = st.load(os.path.join(case, "io.safetensors"))
    cfg = dict(cj["config"])
    assert cfg["src_vocab_size"] == 4 + len(MT_SRC) and cfg["tgt_vocab_size"] == 4 + len(MT_TGT)
    for k in ("src_vocab_size", "tgt_vocab_size", "padding_idx"):
        cfg.pop(k)
    a = __import__("argparse").Namespace(arch="mega_wmt_en_de", task="translation", source_lang="en", target_lang="de",
                                         dropout=0.1, attention_dropout=0.0, hidden_dropout=0.0, seed=1, **cfg)
    sd = {k: torch.from_numpy(np.array(v)) for k, v in W.items()}
    sd["encoder.version"] = torch.Tensor([3])
    sd["decoder.version"] = torch.Tensor([3])
    ck = {"args": a, "model": sd, "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion",
                                                         "optimizer_name": "FairseqAdam",
                                                         "lr_scheduler_state": {"best": 4.0}, "num_updates": 10}],
          "extra_state": {"epoch": 1, "train_iterator": {"epoch": 1}}, "last_optimizer_state": None}
    d = os.path.join(out, "mt")
    os.makedirs(d, exist_ok=True)
    torch.save(ck, os.path.join(d, "model.pt"))
    for name, toks in (("dict.en.txt", MT_SRC), ("dict.de.txt", MT_TGT)):
        with open(os.path.join(d, name), "w") as f:
            for i, t in enumerate(toks):
                f.write(f"{t} {1000 - i}\n")
    st.save(os.path.join(d, "expected.safetensors"),
            {k: io[k] for k in ("src_tokens", "prev_output_tokens", "logits")},
            {"generator": "tests/ref/gen_fairseq.py from the official MegaModel case "
                          "s2s_softmax_simple_layernorm_pre_encc8_ragged_sep (official commit %s)" % cj["official_commit"]})
    print(f"{d}: {len(W)} tensors, V {4 + len(MT_SRC)} -> {4 + len(MT_TGT)}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "fairseq"))
    p.add_argument("--repo", default=REPO)
    o = p.parse_args()
    O = co.import_official(o.repo)
    byte_lm(O, o.out)
    word_lm(O, o.out, "word_lm", True)
    word_lm(O, o.out, "word_lm_untied", False)
    lra_cls(O, o.out)
    mt(o.out)


if __name__ == "__main__":
    main()
