#!/bin/sh
# The Hugging Face transformers layout (mega hf-export / hf-import, docs/interop.md):
#   sh tests/sh/test_hf.sh BUILD_DIR
#  - three small models (a language model: chunked, simple bias, layernorm, untied; another:
#    full attention, rotary bias, batchnorm, laplace attention, tied, truncated EMA, no FFN; a
#    classifier: bidirectional, scalenorm, rotary) go to the layout and back: the weights come
#    back byte for byte and `mega eval` (and predict) print the same;
#  - the exported config.json has MegaConfig's field names (no other keys) with the model's values;
#  - the exported tensors are exactly the names and shapes that modeling_mega.py would create for
#    that config.json (the list below is written from huggingface/transformers
#    src/transformers/models/mega/modeling_mega.py: MegaEmbeddings, MegaMovingAverageGatedAttention,
#    MegaMultiDimensionDampedEma, MegaSimple/RotaryRelativePositionalBias, MegaSequenceNorm,
#    MegaNormalizedFeedForwardNetwork, MegaForCausalLM; transformers itself cannot run here);
#  - what cannot be represented is refused, both ways, with one line, exit 2 and nothing written.
# Needs /usr/bin/python3 (the standard library only) to read and edit safetensors files.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
if ! [ -x "$PY" ]; then
  echo "NOTE test_hf.sh skipped: /usr/bin/python3 not installed"
  finish
fi
M="$B/mega"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
cd "$T" || exit 1

cat >st.py <<'EOF'
# safetensors without numpy: read (header, raw bytes per tensor), write, compare, and the
# expected transformers layout of a config.json
import json, struct, sys

def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    data = {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
    return meta, data

def save(p, meta, data):
    h, off, blobs = {"__metadata__": meta} if meta else {}, 0, []
    for k, (dt, shape, raw) in data.items():
        h[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    hb = json.dumps(h).encode()
    hb += b" " * (-len(hb) % 8)
    open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))

# MegaConfig.__init__ (configuration_mega.py) and the PretrainedConfig keys an export writes
MEGA_KEYS = """vocab_size hidden_size num_hidden_layers intermediate_size ema_projection_size bidirectional
shared_representation_size use_chunking chunk_size truncation normalize_before_mega normalization_type
norm_affine activation attention_activation dropout_prob hidden_dropout_prob attention_probs_dropout_prob
use_feature_dropout use_normalized_ffn nffn_hidden_size normalize_before_ffn nffn_activation_dropout_prob
max_positions add_token_type_embeddings type_vocab_size initializer_range ema_delta_alpha_range
ema_beta_range ema_gamma_omega_range pad_token_id bos_token_id eos_token_id relative_positional_bias
classifier_dropout use_cache add_lm_hidden_dense_layer""".split()
PRETRAINED_KEYS = "architectures model_type is_decoder tie_word_embeddings torch_dtype".split()

def expected(c):
    """name -> shape of the state dict of MegaForCausalLM (is_decoder) or MegaModel, as
    modeling_mega.py builds it for config c (MegaModel's pooler excepted: see docs/interop.md)"""
    lm = c["architectures"] == ["MegaForCausalLM"]
    p = "mega." if lm else ""
    V, D, Z, E, N = c["vocab_size"], c["hidden_size"], c["shared_representation_size"], c["intermediate_size"], c["ema_projection_size"]
    kd = 2 * D if c["bidirectional"] else D
    e = {p + "embedding_layer.word_embeddings.weight": [V, D]}
    if c.get("add_token_type_embeddings", False):
        e[p + "embedding_layer.token_type_embeddings.weight"] = [c.get("type_vocab_size", 2), D]
    def norm(pre):
        t, aff = c.get("normalization_type", "scalenorm"), c.get("norm_affine", True)
        if t in ("layernorm", "rmsnorm", "batchnorm") and aff:
            e[pre + "weight"] = [D]
            if t != "rmsnorm": e[pre + "bias"] = [D]
        if t == "scalenorm" and aff: e[pre + "scalar"] = [1]
        if t == "batchnorm":
            e[pre + "running_mean"] = [D]; e[pre + "running_var"] = [D]; e[pre + "num_batches_tracked"] = []
    for i in range(c["num_hidden_layers"]):
        l = "%slayers.%d." % (p, i)
        g = l + "mega_layer."
        e[g + "qk_weight"] = [2, Z]; e[g + "qk_bias"] = [2, Z]
        norm(g + "norm.norm.")
        for n in ("damping_factor", "decay_factor", "ema_expansion_matrix"): e[g + "ema_gate." + n] = [kd, N, 1]
        e[g + "ema_gate.kernel_projection_matrix"] = [kd, N]; e[g + "ema_gate.residual_weight"] = [D]
        e[g + "v_proj.weight"] = [E, D]; e[g + "v_proj.bias"] = [E]
        e[g + "mx_proj.weight"] = [Z + E + 2 * D, D]; e[g + "mx_proj.bias"] = [Z + E + 2 * D]
        e[g + "h_proj.weight"] = [D, E]; e[g + "h_proj.bias"] = [D]
        if c.get("relative_positional_bias", "rotary") == "simple":
            e[g + "rel_pos_bias.rel_pos_bias"] = [2 * c["max_positions"] - 1]
        else:
            e[g + "rel_pos_bias.alpha"] = [1, Z]; e[g + "rel_pos_bias.b_param"] = [1, Z]; e[g + "rel_pos_bias._float_tensor"] = [1]
        if c.get("use_normalized_ffn", True):
            F = c["nffn_hidden_size"]
            norm(l + "nffn.norm.norm.")
            e[l + "nffn.fc1.weight"] = [F, D]; e[l + "nffn.fc1.bias"] = [F]
            e[l + "nffn.fc2.weight"] = [D, F]; e[l + "nffn.fc2.bias"] = [D]
    if lm:
        if c.get("add_lm_hidden_dense_layer", True): e["dense.weight"] = [D, D]; e["dense.bias"] = [D]
        if not c.get("tie_word_embeddings", True): e["lm_head.weight"] = [V, D]
        e["lm_head.bias"] = [V]
    return e

cmd = sys.argv[1]
if cmd == "layout":  # HFDIR: config keys, the tensors against expected(), format pt
    c = json.load(open(sys.argv[2] + "/config.json"))
    meta, data = load(sys.argv[2] + "/model.safetensors")
    bad = [k for k in c if k not in MEGA_KEYS + PRETRAINED_KEYS]
    exp = expected(c)
    got = {k: v[1] for k, v in data.items()}
    miss = sorted(set(exp) - set(got)); extra = sorted(set(got) - set(exp))
    shp = sorted(k for k in exp if k in got and exp[k] != got[k])
    print("ok" if not (bad or miss or extra or shp) and meta.get("format") == "pt" else "BAD",
          "%d tensors" % len(got), "unknown keys", bad, "missing", miss[:3], "extra", extra[:3], "shapes", shp[:3], "format", meta.get("format"))
elif cmd == "config":  # HFDIR key=value...: the config's values
    c = json.load(open(sys.argv[2] + "/config.json"))
    wrong = [kv for kv in sys.argv[3:] if json.dumps(c.get(kv.split("=", 1)[0], "ABSENT")) != kv.split("=", 1)[1]]
    print("ok" if not wrong else "BAD", wrong)
elif cmd == "same":  # A B: the same tensors (names, dtypes, shapes, bytes)
    _, a = load(sys.argv[2]); _, b = load(sys.argv[3])
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    print("ok" if not diff else "BAD", "%d tensors" % len(a), diff[:3])
elif cmd == "edit-config":  # HFDIR key=json... (key=DELETE removes it)
    p = sys.argv[2] + "/config.json"; c = json.load(open(p))
    for kv in sys.argv[3:]:
        k, v = kv.split("=", 1)
        if v == "DELETE": c.pop(k, None)
        else: c[k] = json.loads(v)
    json.dump(c, open(p, "w"))
elif cmd == "edit-tensors":  # HFDIR drop NAME | add NAME | bias-one | shape NAME
    p = sys.argv[2] + "/model.safetensors"; meta, d = load(p)
    op, name = sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else ""
    if op == "drop": del d[name]
    if op == "add": d[name] = ("F32", [2], b"\0" * 8)
    if op == "bias-one":
        dt, s, raw = d["lm_head.bias"]; d["lm_head.bias"] = (dt, s, struct.pack("<f", 1.0) + raw[4:])
    if op == "shape":
        dt, s, raw = d[name]; d[name] = (dt, [s[0] - 1] + s[1:], raw[:len(raw) * (s[0] - 1) // s[0]])
    save(p, meta, d)
elif cmd == "edit-meta":  # FILE key=value... (key=DELETE removes it): the safetensors metadata
    meta, d = load(sys.argv[2])
    for kv in sys.argv[3:]:
        k, v = kv.split("=", 1)
        if v == "DELETE": meta.pop(k, None)
        else: meta[k] = v
    save(sys.argv[2], meta, d)
EOF

head -c 6000 "$(dirname "$B")/README.md" >text.txt 2>/dev/null || printf 'some text to model, some text to model.\n%.0s' 1 2 3 4 5 6 7 8 >text.txt
small="--layers 2 --embed-dim 16 --z-dim 8 --hidden-dim 24 --n-dim 4 --steps 2 --batch 2 --seq-len 32 --threads 1 --quiet"
"$M" train --data text.txt --out lmA $small --ffn-dim 32 --chunk-size 8 --postnorm --no-scale-embedding >/dev/null 2>&1
status $? "train LM A (post-norm, unscaled embeddings, chunked, simple bias)"
"$M" train --data text.txt --out lmB $small --ffn-dim 0 --chunk-size -1 --max-positions 64 --rel-pos-bias rotary \
  --norm-type batchnorm --attention-activation laplace --truncation 16 --tie-embeddings --postnorm --no-scale-embedding >/dev/null 2>&1
status $? "train LM B (rotary, batchnorm, laplace, tied, truncated EMA, no FFN)"
"$M" listops --out lo --train 40 --valid 8 --test 16 --min-len 10 --max-len 40 --max-depth 3 --seed 3 >/dev/null 2>&1
"$M" train --task classify --data lo/train.tsv --valid lo/valid.tsv $small --ffn-dim 32 --chunk-size -1 \
  --max-positions 64 --norm-type scalenorm --rel-pos-bias rotary --out clsC >/dev/null 2>&1
status $? "train classifier C (bidirectional encoder, scalenorm, rotary)"

roundtrip() { # NAME MODEL: export, check the layout, import, compare
  n=$1 m=$2
  "$M" hf-export --model "$m" --out "hf$n" >"ex$n.out" 2>&1
  status $? "$n: hf-export: $(cat "ex$n.out")"
  r=$("$PY" st.py layout "hf$n")
  case "$r" in ok*) ok "$n: tensors are modeling_mega.py's names and shapes for config.json ($r)" ;; *) bad "$n: layout: $r" ;; esac
  "$M" hf-import --hf "hf$n" --out "back$n" >"im$n.out" 2>&1
  status $? "$n: hf-import: $(cat "im$n.out")"
  r=$("$PY" st.py same "$(ls "$m"/step-*.model.safetensors | tail -1)" "back$n/model.safetensors")
  case "$r" in ok*) ok "$n: weights back byte for byte ($r)" ;; *) bad "$n: weights differ: $r" ;; esac
}
roundtrip A lmA
r=$("$PY" st.py config hfA 'architectures=["MegaForCausalLM"]' 'model_type="mega"' vocab_size=257 hidden_size=16 \
  num_hidden_layers=2 shared_representation_size=8 intermediate_size=24 ema_projection_size=4 nffn_hidden_size=32 \
  use_normalized_ffn=true use_chunking=true chunk_size=8 max_positions=1024 'relative_positional_bias="simple"' \
  'normalization_type="layernorm"' normalize_before_mega=false normalize_before_ffn=false is_decoder=true \
  bidirectional=false add_token_type_embeddings=false add_lm_hidden_dense_layer=false tie_word_embeddings=false \
  pad_token_id=256 bos_token_id=null eos_token_id=null truncation=null 'activation="silu"' 'attention_activation="softmax"')
case "$r" in ok*) ok "A: config.json has MegaConfig's names with the model's values" ;; *) bad "A: config.json: $r" ;; esac
roundtrip B lmB
r=$("$PY" st.py config hfB use_chunking=false chunk_size=-1 max_positions=64 'relative_positional_bias="rotary"' \
  'normalization_type="batchnorm"' 'attention_activation="laplace"' truncation=16 tie_word_embeddings=true use_normalized_ffn=false)
case "$r" in ok*) ok "B: config.json values (rotary, batchnorm, laplace, tied, truncation)" ;; *) bad "B: config.json: $r" ;; esac
roundtrip C clsC
r=$("$PY" st.py config hfC 'architectures=["MegaModel"]' is_decoder=false bidirectional=true 'normalization_type="scalenorm"')
case "$r" in ok*) ok "C: config.json of the encoder (MegaModel, bidirectional)" ;; *) bad "C: config.json: $r" ;; esac

# --which of a run directory: best (the default) or last, as the other commands choose
"$M" train --data text.txt --out lmW $small --steps 4 --lr 5 --warmup 0 --eval-every 1 --save-every 1 --ffn-dim 32 \
  --chunk-size 8 --postnorm --no-scale-embedding >/dev/null 2>&1
bs=$("$PY" -c 'import json,struct,sys
b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]; print(json.loads(b[8:8+n])["__metadata__"]["step"])' lmW/best.safetensors 2>/dev/null)
[ -n "$bs" ] && [ "$bs" != 4 ] && ok "W: the best model (step $bs) is not the last (step 4)" || bad "W: best step '$bs'"
for w in best last; do
  "$M" hf-export --model lmW --which $w --out "hfW$w" >/dev/null 2>&1 && "$M" hf-import --hf "hfW$w" --out "backW$w" >/dev/null 2>&1
  status $? "W: hf-export --which $w, then hf-import"
done
"$M" hf-export --model lmW --out hfWdef >/dev/null 2>&1 && "$M" hf-import --hf hfWdef --out backWdef >/dev/null 2>&1
r=$("$PY" st.py same lmW/best.safetensors backWbest/model.safetensors)
case "$r" in ok*) ok "W: --which best exports best.safetensors" ;; *) bad "W: --which best: $r" ;; esac
r=$("$PY" st.py same lmW/step-00000004.model.safetensors backWlast/model.safetensors)
case "$r" in ok*) ok "W: --which last exports the newest checkpoint" ;; *) bad "W: --which last: $r" ;; esac
r=$("$PY" st.py same lmW/best.safetensors backWdef/model.safetensors)
case "$r" in ok*) ok "W: without --which, the best" ;; *) bad "W: default: $r" ;; esac
r=$("$PY" st.py same backWbest/model.safetensors backWlast/model.safetensors)
case "$r" in ok*) bad "W: the best and the last exports are the same weights" ;; *) ok "W: the best and the last exports differ" ;; esac

# the same model: identical evaluation (streaming and full-forward windows)
for n in A B; do
  src=lm$n
  a=$("$M" eval --model "$src" --data text.txt --max-bytes 1500 --quiet 2>&1 | cut -d'|' -f1-3)
  b=$("$M" eval --model "back$n" --data text.txt --max-bytes 1500 --quiet 2>&1 | cut -d'|' -f1-3)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "$n: mega eval equal after the round trip ($a)" || bad "$n: eval differs: '$a' vs '$b'"
  a=$("$M" eval --model "$src" --data text.txt --max-bytes 1500 --lengths 32 --quiet 2>&1 | cut -d'|' -f1-2)
  b=$("$M" eval --model "back$n" --data text.txt --max-bytes 1500 --lengths 32 --quiet 2>&1 | cut -d'|' -f1-2)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "$n: full-forward windows equal" || bad "$n: --lengths differs: '$a' vs '$b'"
done
a=$("$M" eval --model clsC --data lo/test.tsv --quiet 2>&1 | cut -d'|' -f1-2)
b=$("$M" eval --model backC --data lo/test.tsv --quiet 2>&1 | cut -d'|' -f1-2)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "C: classifier accuracy and loss equal ($a)" || bad "C: eval differs: '$a' vs '$b'"
"$M" predict --model clsC --data lo/test.tsv >p1 2>/dev/null && "$M" predict --model backC --data lo/test.tsv >p2 2>/dev/null &&
  cmp -s p1 p2 && [ -s p1 ] && ok "C: predictions equal" || bad "C: predictions differ"

# refusals: exit 2, one line naming the problem, nothing written
refuse() { # NAME PATTERN OUTDIR CMD...
  name=$1 pat=$2 o=$3; shift 3
  rm -rf "$o"
  "$@" >out 2>err; rc=$?
  if [ $rc -eq 2 ] && grep -q "$pat" err && [ "$(wc -l <err)" -eq 1 ] && [ ! -e "$o/model.safetensors" ] && [ ! -e "$o/config.json" ]; then
    ok "refused: $name"
  else
    bad "$name: exit $rc, $(cat err)"
  fi
}
"$M" train --data text.txt --out pre $small --ffn-dim 32 >/dev/null 2>&1
refuse "export of a pre-norm model" "final norm" X "$M" hf-export --model pre --out X
"$M" train --data text.txt --out scaled $small --ffn-dim 32 --postnorm >/dev/null 2>&1
refuse "export of scaled embeddings" "sqrt(embed-dim)" X "$M" hf-export --model scaled --out X
"$M" train --data text.txt --out rms $small --ffn-dim 32 --postnorm --no-scale-embedding --norm-type rmsnorm >/dev/null 2>&1
refuse "export of rmsnorm" "MegaRMSNorm" X "$M" hf-export --model rms --out X
"$M" train --data text.txt --out mha $small --ffn-dim 32 --postnorm --no-scale-embedding --mixer mha >/dev/null 2>&1
refuse "export of another mixer" "mha mixer" X "$M" hf-export --model mha --out X
refuse "export of a missing model" "" X "$M" hf-export --model nothing --out X
"$M" train --data text.txt --out adapt $small --ffn-dim 32 --postnorm --no-scale-embedding --adaptive-input --adaptive-input-cutoff 64 --adaptive-softmax-cutoff 64 --tie-adaptive-weights >/dev/null 2>&1
refuse "export of adaptive input / softmax" "no counterpart" X "$M" hf-export --model adapt --out X

edit() { rm -rf E; cp -r hfA E; "$PY" st.py "$@"; }
edit edit-config E normalize_before_mega=true normalize_before_ffn=true
refuse "import of pre-norm blocks" "normalize_before_mega true" Y "$M" hf-import --hf E --out Y
edit edit-config E normalize_before_ffn=true
refuse "import of mixed pre/post norm" "differ" Y "$M" hf-import --hf E --out Y
edit edit-config E add_lm_hidden_dense_layer=DELETE
refuse "import with the default add_lm_hidden_dense_layer" "add_lm_hidden_dense_layer" Y "$M" hf-import --hf E --out Y
edit edit-config E add_token_type_embeddings=true
refuse "import of token type embeddings" "token type" Y "$M" hf-import --hf E --out Y
edit edit-config E 'normalization_type="rmsnorm"'
refuse "import of rmsnorm" "rmsnorm" Y "$M" hf-import --hf E --out Y
edit edit-config E 'architectures=["MegaForMaskedLM"]'
refuse "import of MegaForMaskedLM" "MegaForMaskedLM" Y "$M" hf-import --hf E --out Y
edit edit-config E is_decoder=false
refuse "import of a causal LM without is_decoder" "causal mask" Y "$M" hf-import --hf E --out Y
edit edit-config E bidirectional=true
refuse "import of a bidirectional causal LM" "bidirectional" Y "$M" hf-import --hf E --out Y
edit edit-config E hidden_size=DELETE
refuse "import without hidden_size" "'hidden_size' is missing" Y "$M" hf-import --hf E --out Y
edit edit-config E 'model_type="bert"'
refuse "import of another model type" "model_type" Y "$M" hf-import --hf E --out Y
edit edit-config E hidden_size=32
refuse "import with a config that does not fit the tensors" "implies" Y "$M" hf-import --hf E --out Y
edit edit-tensors E drop mega.layers.1.nffn.fc2.bias
refuse "import with a missing tensor" "no tensor 'mega.layers.1.nffn.fc2.bias'" Y "$M" hf-import --hf E --out Y
edit edit-tensors E shape mega.layers.0.mega_layer.v_proj.weight
refuse "import of a tensor of the wrong shape" "v_proj.weight' has shape" Y "$M" hf-import --hf E --out Y
edit edit-tensors E add dense.weight
refuse "import with the LM's dense layer tensor" "dense+tanh" Y "$M" hf-import --hf E --out Y
edit edit-tensors E add mega.something.else
refuse "import with an unknown tensor" "mega.something.else" Y "$M" hf-import --hf E --out Y
edit edit-tensors E bias-one
refuse "import of a non-zero lm_head.bias" "lm_head.bias is not zero" Y "$M" hf-import --hf E --out Y
rm -rf E && cp -r hfA E && rm E/model.safetensors
refuse "import without model.safetensors" "no model.safetensors" Y "$M" hf-import --hf E --out Y
rm -rf E && cp -r hfA E && echo '{"vocab' >E/config.json
refuse "import of a broken config.json" "not a JSON object" Y "$M" hf-import --hf E --out Y
refuse "import of a missing directory" "config" Y "$M" hf-import --hf nowhere --out Y
rm -rf Z && cp -r lmA Z && before=$(ls Z | wc -l)
"$M" hf-import --hf hfA --out Z >out 2>err
[ $? -eq 2 ] && grep -q "holds a training run" err && [ "$(ls Z | wc -l)" -eq "$before" ] &&
  ok "refused: import into a training run's directory" || bad "import into a run directory: $(cat err)"
rm -rf E && cp -r hfC E && rm E/mega_cls_head.safetensors
refuse "import of an encoder without its head file" "mega_cls_head.safetensors" Y "$M" hf-import --hf E --out Y

# the metadata an import copies is checked as the loaders check it (docs/bad-inputs.md H01-H03)
edit edit-meta E/model.safetensors tokens-per-sample=-5
refuse "H01 import of tokens-per-sample -5" "tokens-per-sample '-5' is not a count" Y "$M" hf-import --hf E --out Y
edit edit-meta E/model.safetensors tokens-per-sample=
refuse "H01 import of an empty tokens-per-sample" "tokens-per-sample '' is not a count" Y "$M" hf-import --hf E --out Y
edit edit-meta E/model.safetensors 'vocab={"kind": "fairseq", "tokens": 5'
refuse "H02 import of a malformed fairseq vocabulary" "E/model.safetensors" Y "$M" hf-import --hf E --out Y
edit edit-meta E/model.safetensors 'vocab={garbage'
refuse "H02 import of a vocabulary that is not a dictionary" "vocab is not a fairseq dictionary" Y "$M" hf-import --hf E --out Y
rm -rf E && cp -r hfC E && "$PY" st.py edit-meta E/mega_cls_head.safetensors 'classes=["a", "a"]'
refuse "H03 import of a classifier with repeated class names" "metadata classes is not a list" Y "$M" hf-import --hf E --out Y
rm -rf E && cp -r hfC E && "$PY" st.py edit-meta E/mega_cls_head.safetensors 'vocab={"kind": "bytes"'
refuse "H03 import of a classifier with a broken vocabulary" "metadata vocab is not a vocabulary" Y "$M" hf-import --hf E --out Y
rm -rf E && cp -r hfC E && "$PY" st.py edit-meta E/mega_cls_head.safetensors 'data-format=frob'
refuse "H03 import of a classifier with an unknown data format" "data-format 'frob'" Y "$M" hf-import --hf E --out Y

# H04: new weights beside an old config.json (an export stopped between its renames): a config
# that still fits every tensor (another activation) is refused, not imported with the wrong function
edit edit-config E 'activation="gelu"'
refuse "H04 import of weights exported with another config.json" "another config.json" Y "$M" hf-import --hf E --out Y
rm -rf E && cp -r hfA E && "$PY" - E/config.json <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); json.dump(c, open(sys.argv[1], "w"), indent=1)
PYEOF
"$M" hf-import --hf E --out Y2 >out 2>err
status $? "H04 config.json rewritten with other blanks (same content) still imports: $(cat err)"
edit edit-meta E/model.safetensors mega-hf-config=DELETE && "$PY" st.py edit-config E 'activation="gelu"'
"$M" hf-import --hf E --out Y3 >out 2>err
status $? "H04 weights without the fingerprint (saved by transformers) import with their config.json: $(cat err)"

# H05, H06: --out is the input (also by another path): refused, the input untouched
rm -rf E && cp -r hfA E && sum0=$(cat E/* | cksum)
refuse "H05 hf-import --out its --hf" "would overwrite its input" NONE "$M" hf-import --hf E --out E
refuse "H05 hf-import --out ./E/. (the same directory)" "would overwrite its input" NONE "$M" hf-import --hf E --out ./E/.
ln -s E Elink
refuse "H05 hf-import --out a symlink to its --hf" "would overwrite its input" NONE "$M" hf-import --hf E --out Elink
[ "$(cat E/* | cksum)" = "$sum0" ] && [ "$(ls E | wc -l)" -eq 2 ] && ok "H05 the --hf directory is unchanged" || bad "H05 the --hf directory changed"
rm -rf R && cp -r lmA R && sum0=$(cat R/* | cksum)
refuse "H06 hf-export --out the run directory" "would overwrite its input" NONE "$M" hf-export --model R --out R
refuse "H06 hf-export --out the directory of its model file" "would overwrite its input" NONE "$M" hf-export --model R/model.safetensors --out ./R
[ "$(cat R/* | cksum)" = "$sum0" ] && [ ! -e R/config.json ] && ok "H06 the run directory is unchanged" || bad "H06 the run directory changed"

# H07: temporaries. A stale one of a dead export is removed, another file kept; none is left
# after an export, nor after one that failed writing (a file size limit)
rm -rf X && mkdir X && head -c 1000 /dev/zero >X/.mega-hf-export.2147483000.model.safetensors &&
  head -c 1000 /dev/zero >X/.mega-hf-export.2147483000.model.safetensors.tmp.2147483000 && echo keep >X/.other
"$M" hf-export --model lmA --out X >out 2>err
status $? "H07 export into a directory with stale temporaries: $(cat err)"
[ -z "$(ls -A X | grep mega-hf-export)" ] && [ -e X/.other ] && [ -e X/config.json ] &&
  ok "H07 the stale temporaries are removed, the other file kept" || bad "H07 left: $(ls -A X | tr '\n' ' ')"
rm -rf X && "$M" hf-export --model lmA --out X >/dev/null 2>&1 && sum0=$(cat X/* | cksum)
sh -c "trap '' XFSZ; ulimit -f 16; exec '$M' hf-export --model lmB --out X" >out 2>err
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <err)" -eq 1 ] && [ -z "$(ls -A X | grep mega-hf-export)" ] && [ "$(cat X/* | cksum)" = "$sum0" ] &&
  ok "H07 a failed export leaves no temporary and the earlier export whole: $(cat err)" ||
  bad "H07 failed export: exit $rc, $(cat err); left: $(ls -A X | tr '\n' ' ')"
finish

