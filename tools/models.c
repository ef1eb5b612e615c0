/* The models the commands open (models.h). */
#include "models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* what each kind of the library's list (MEGA_MODEL_LIST) is called in messages */
static const char *const NOUNS[MEGA_MODEL_COUNT] = {
    [MEGA_MODEL_LM] = "language model",
    [MEGA_MODEL_CLS] = "classifier",
    [MEGA_MODEL_S2S] = "translation model",
};

const char *model_kind_noun(mega_model_kind k) { return (unsigned)k < MEGA_MODEL_COUNT && NOUNS[k] ? NOUNS[k] : "model"; }

int model_file_kind(const char *path, mega_model_kind *k) {
    mega_st_file *f;
    if (mega_st_open(path, &f) != MEGA_OK) return -1;
    const mega_status st = mega_model_kind_of_json(mega_st_meta(f, "config"), k);
    mega_st_close(f);
    return st == MEGA_OK ? 0 : -2;
}

const mega_load_opts MODEL_INFERENCE = {1, 0};

const char *tool_which = "best";

const char *model_path(const char *m, char *buf, size_t n) {
    return mega_model_file_which(m, tool_which, buf, n) ? NULL : buf;
}

int model_open(const char *arg, char *path, size_t n, mega_model_kind *k) {
    /* a file that cannot be read says why */
    if (!model_path(arg, path, n)) return cli_error("%s", mega_last_error());
    const int rc = model_file_kind(path, k);
    if (rc == -2) return cli_error("%s: %s", path, mega_last_error()); /* the file's config: name the file */
    if (rc) return cli_error("%s", mega_last_error());
    return 0;
}

/* ---- language models ---- */

int load_model(const char *arg, int chunk_override, mega_lm **out) { return load_model_ex(arg, chunk_override, -1, out); }

/* *m rebuilt with config c and its weights reloaded from path (the evaluation-time options that
 * change the layers' shapes or masks) */
static mega_status rebuild_model(mega_lm **m, const mega_lm_config *c, const char *path) {
    mega_lm_free(*m);
    *m = NULL;
    const mega_load_opts o = {1, 1}; /* no gradients; the weights are loaded next, not drawn */
    mega_status st = mega_lm_create_ex(c, &o, m);
    if (!st) st = mega_lm_load_weights(*m, path);
    if (st) mega_lm_free(*m), *m = NULL;
    return st;
}

int load_model_ex(const char *arg, int chunk_override, int attn_window, mega_lm **out) {
    char p[4096];
    if (!model_path(arg, p, sizeof p) || mega_lm_load_ex(p, &MODEL_INFERENCE, out) != MEGA_OK) return cli_error("%s", mega_last_error());
    if (attn_window >= 0 && attn_window != mega_lm_get_config(*out)->block.attn_window) {
        mega_lm_config c = *mega_lm_get_config(*out);
        c.block.attn_window = attn_window;
        if (rebuild_model(out, &c, p) != MEGA_OK) return cli_error("--attn-window: %s", mega_last_error());
    }
    if (chunk_override != 0 && chunk_override != mega_lm_get_config(*out)->block.chunk_size) {
        /* train short, test long: rebuild with another attention chunk and reload the weights */
        mega_lm_config c = *mega_lm_get_config(*out);
        if (c.block.rel_pos_bias != MEGA_RELPOS_ROTARY) {
            mega_lm_free(*out);
            *out = NULL;
            return cli_error("--chunk-size %d: this model has a simple relative-position bias, whose table is sized by the "
                             "training chunk (%d); only rotary-bias models can change the chunk at evaluation",
                             chunk_override, c.block.chunk_size);
        }
        c.block.chunk_size = chunk_override;
        if (rebuild_model(out, &c, p) != MEGA_OK) return cli_error("%s", mega_last_error());
    }
    return 0;
}

int lm_meta(const mega_st_file *f, const char *path, int vocab_size, mega_fdict **d, size_t *tps) {
    *d = NULL, *tps = 0;
    const char *t = mega_st_meta(f, "tokens-per-sample");
    if (t) {
        /* digits only: strtoll would also take "", " 5" and "+5" */
        size_t n = strspn(t, "0123456789");
        if (n == 0 || t[n] || n > 15) return cli_error("%s: metadata tokens-per-sample '%s' is not a count", path, t);
        *tps = (size_t)strtoll(t, NULL, 10);
    }
    return meta_fdict(f, "vocab", vocab_size, path, "fairseq dictionary", d);
}

int lm_vocab(const char *path, const mega_lm_config *c, mega_fdict **d, size_t *tps) {
    *d = NULL, *tps = 0;
    mega_st_file *f;
    if (mega_st_open(path, &f) != MEGA_OK) return cli_error("%s", mega_last_error());
    const int rc = lm_meta(f, path, c->vocab_size, d, tps);
    mega_st_close(f);
    return rc;
}

/* ---- classifiers ---- */

int load_cls_model(const char *arg, cls_model *cm) {
    char p[4096];
    memset(cm, 0, sizeof *cm);
    if (!model_path(arg, p, sizeof p) || mega_cls_load_ex(p, &MODEL_INFERENCE, &cm->m) != MEGA_OK) return cli_error("%s", mega_last_error());
    mega_st_file *f;
    if (mega_st_open(p, &f) != MEGA_OK) return cli_error("%s", mega_last_error());
    const char *cj = mega_st_meta(f, "classes"), *vj = mega_st_meta(f, "vocab"), *fm = mega_st_meta(f, "data-format");
    const char *fs = mega_st_meta(f, "format");
    /* scripts/convert_fairseq.py: a fairseq dictionary, classes named by the label dictionary or not
     * at all (then by their ids) */
    /* or trained here on the LRA binarized layout (mega train --task classify --data DIR): its
     * vocabulary is a fairseq dictionary too */
    cm->fairseq = (fs && !strncmp(fs, "mega-convert-fairseq", 20)) || (vj && strstr(vj, "\"fairseq\""));
    cm->named = cj != NULL;
    char ids[64 * 12] = "[";
    if (cm->fairseq && !cj) {
        const int C = mega_cls_get_config(cm->m)->classes;
        for (int i = 0; i < C && strlen(ids) + 16 < sizeof ids; i++) snprintf(ids + strlen(ids), 16, "%s\"%d\"", i ? "," : "", i);
        strcat(ids, "]");
        cj = ids;
    }
    /* a masked-LM model (mega train --task mlm) has a vocabulary and no classes */
    const int mlm = mega_cls_get_config(cm->m)->mlm;
    int bad = (!mlm && (!cj || mega_classes_from_json(cj, &cm->classes) != MEGA_OK)) ||
              (!cm->fairseq && (!vj || mega_vocab_from_json(vj, &cm->vocab) != MEGA_OK)) ||
              (cm->fairseq && vj && mega_fdict_from_json(vj, &cm->dict) != MEGA_OK);
    /* a format this build does not know reads as text (the loaders' fallback) */
    if (!fm) cm->format = MEGA_DATA_AUTO;
    else if (mega_data_format_parse(fm, &cm->format)) cm->format = MEGA_DATA_TEXT;
    mega_st_close(f);
    if (bad) return cli_error("%s: no readable vocabulary/classes in the metadata (was it written by mega train --task classify?)", p);
    /* mega_cls_load refuses more names than outputs; fewer is what --classes N writes (N above
     * the labels of the training data: the extra outputs have no name) */
    const int C = mega_cls_get_config(cm->m)->classes;
    if (cm->classes.n > C) return cli_error("%s: %d class names but the head has %d outputs", p, cm->classes.n, C);
    return 0;
}

void free_cls_model(cls_model *cm) {
    mega_cls_free(cm->m);
    mega_classes_free(&cm->classes);
    mega_fdict_free(cm->dict);
}

/* ---- encoder-decoders ---- */

void s2s_dicts_free(s2s_dicts *d) {
    mega_fdict_free(d->src), mega_fdict_free(d->tgt);
    if (d->tgt_bpe != d->src_bpe) mega_bpe_free(d->tgt_bpe);
    mega_bpe_free(d->src_bpe);
    memset(d, 0, sizeof *d);
}

static int s2s_vocab(const char *path, const mega_s2s_config *c, s2s_dicts *d) {
    memset(d, 0, sizeof *d);
    mega_st_file *f;
    if (mega_st_open(path, &f) != MEGA_OK) return cli_error("%s", mega_last_error());
    int rc = meta_fdict(f, "vocab", c->src_vocab_size, path, "source dictionary", &d->src);
    if (!rc) rc = meta_fdict(f, "tgt-vocab", c->tgt_vocab_size, path, "target dictionary", &d->tgt);
    if (!rc && !d->src != !d->tgt) rc = cli_error("%s: a fairseq dictionary for one side only", path);
    mega_st_close(f);
    if (rc) mega_fdict_free(d->src), mega_fdict_free(d->tgt), memset(d, 0, sizeof *d);
    return rc;
}

int load_s2s(const char *arg, mega_s2s **m, s2s_dicts *dicts, int allow_fdict) {
    char p[4096];
    memset(dicts, 0, sizeof *dicts);
    if (!model_path(arg, p, sizeof p) || mega_s2s_load_ex(p, &MODEL_INFERENCE, m) != MEGA_OK)
        return cli_error("%s", mega_last_error());
    const mega_s2s_config *c = mega_s2s_get_config(*m);
    if (s2s_vocab(p, c, dicts) || (!dicts->src && meta_bpe(p, c, &dicts->src_bpe, &dicts->tgt_bpe))) {
        s2s_dicts_free(dicts);
        mega_s2s_free(*m), *m = NULL;
        return 1;
    }
    if (dicts->src && !allow_fdict) {
        s2s_dicts_free(dicts);
        mega_s2s_free(*m), *m = NULL;
        return cli_error("'%s' was converted from an official checkpoint (fairseq dictionaries): `mega translate` "
                         "translates with it; this evaluation reads the models `mega train --task translate` makes", arg);
    }
    if (dicts->src) return 0;
    if (c->src_vocab_size != mega_bpe_vocab_size(dicts->src_bpe) || c->tgt_vocab_size != mega_bpe_vocab_size(dicts->tgt_bpe) ||
        c->eos_idx != MEGA_S2S_EOS || c->padding_idx != MEGA_S2S_PAD) {
        s2s_dicts_free(dicts);
        mega_s2s_free(*m), *m = NULL;
        return cli_error("'%s' does not use the byte vocabulary (258, pad 256, eos 257) of parallel text, nor subword units", arg);
    }
    dicts->src_longest = mega_bpe_longest(dicts->src_bpe), dicts->tgt_longest = mega_bpe_longest(dicts->tgt_bpe);
    return 0;
}

/* ---- any kind ---- */

int model_load(const char *arg, loaded_model *m) {
    memset(m, 0, sizeof *m);
    if (!model_path(arg, m->path, sizeof m->path)) return cli_error("%s", mega_last_error());
    if (model_file_kind(m->path, &m->kind)) m->kind = MEGA_MODEL_LM; /* its loader says why it cannot be read */
    switch (m->kind) {
    case MEGA_MODEL_S2S:
        if (mega_s2s_load_ex(m->path, &MODEL_INFERENCE, &m->s2s) != MEGA_OK) return cli_error("%s", mega_last_error());
        return meta_bpe(m->path, mega_s2s_get_config(m->s2s), &m->src_bpe, &m->tgt_bpe);
    case MEGA_MODEL_CLS:
        return load_cls_model(arg, &m->cls);
    default: /* MEGA_MODEL_LM */
        break;
    }
    if (load_model(arg, 0, &m->lm)) return 1;
    return lm_vocab(m->path, mega_lm_get_config(m->lm), &m->dict, &m->tps);
}

void loaded_model_free(loaded_model *m) {
    mega_lm_free(m->lm);
    mega_fdict_free(m->dict);
    if (m->kind == MEGA_MODEL_CLS) free_cls_model(&m->cls);
    mega_s2s_free(m->s2s);
    if (m->tgt_bpe != m->src_bpe) mega_bpe_free(m->tgt_bpe);
    mega_bpe_free(m->src_bpe);
    memset(m, 0, sizeof *m);
}
