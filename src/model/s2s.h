/* Internal layout of the encoder–decoder (public API in mega.h). */
#ifndef MEGA_S2S_INTERNAL_H
#define MEGA_S2S_INTERNAL_H
#include "layers/xattn.h"
#include "model/kinds.h"
#include "model/stack.h"

/* one decoder layer (official MegaDecoderLayer): the mixer sublayer (a block without its FFN),
 * the cross-attention, the normalized FFN */
typedef struct {
    mega_block self;
    mega_xattn x;
    mega_nffn ffn; /* when the decoder's ffn_dim > 0 */
} mega_declayer;

struct mega_s2s {
    mega_model hdr;             /* first: a mega_s2s is a mega_model (model/kinds.h) */
    mega_s2s_config cfg;        /* the one copy; the layers point into it */
    mega_block_config dec_self; /* cfg.decoder without the FFN: the decoder layers' sublayer */
    mega_params P;
    size_t src_emb, tgt_emb, out_w;
    mega_seqnorm enc_enorm, dec_enorm; /* normalize_embedding */
    mega_stack enc;                    /* encoder blocks + final norm, with their buffers */
    mega_declayer *dl;
    mega_seqnorm dfnorm;
    int has_dfnorm;
    int Mx; /* the gated cross-attention's max positions */
    int recompute; /* MEGA_RECOMPUTE_BLOCKS at declare: the decoder keeps one layer's activations
                    * (and Y1, Y2), and its backward runs each layer's forward again */
    /* buffer capacities: source and target rows (B x padded length), activation reals per
     * decoder layer (block, cross-attention, FFN), scratch reals */
    size_t Rs_cap, R_cap, scr_cap;
    int32_t *stok, *ttok, *tgt;
    uint8_t *spad, *spadc, *tpad;
    real *enpre, *enstat, *dnpre, *dnstat; /* embeddings before their norm, and its statistics */
    real *E, *dE;                      /* encoder output [B, S, D] and its gradient */
    real *H, *Y1, *Y2;                 /* decoder: layer inputs [(Ld+1)][R][D], after self / cross */
    real *bacts, *xacts, *facts;       /* Y1, Y2 and these: one slot per layer, or one with recompute */
    size_t bper, xper, fper; /* capacities of one layer's activations */
    mega_block_acts *BA;
    mega_xattn_acts *XA;
    mega_nffn_acts *FA;
    real *xf, *fstat, *xfc;            /* decoder features (padded rows), norm stats, compact rows */
    real *scratch;
    real *g[3];                        /* gradient buffers [R][D] */
    real *logits, *lse;                /* [B*L][V], [B*L] */
    /* the last forward */
    int B, S, Sp, L, Lp, src_any_pad, tgt_any_pad, has_targets;
    int64_t count;
    double eps;
    mega_lm_run run;
    mega_bnsync bnsync; /* batchnorm statistics over processes (mega_s2s_set_batch_sync) */
};

/* padded lengths (official: right-padded to a chunk multiple when longer than a chunk) */
int mega__s2s_padded(const mega_block_config *c, int T);
/* the longest target the model decodes: the decoder's relative table (mega_block_context
 * positions) and the gated cross-attention's simple bias (max(max positions)) */
int mega__s2s_max_len(const mega_s2s *m);
/* encoder forward on src [B,S] into m->E (and m->spadc, m->src_any_pad); eval or training */
mega_status mega__s2s_encode(mega_s2s *m, const int32_t *src, int B, int S, int training, uint64_t key);
/* reserve the buffers for B x S (source) and B x L (target) */
mega_status mega__s2s_reserve(mega_s2s *m, int B, int S, int L);

struct mega_s2s_stream {
    mega_s2s *m;
    int B, Smax, tmax, rep, S;
    int64_t pos;
    mega_block_state *SS;
    mega_xattn_state *XS;
    real *smem, *xmem, *E, *x, *y, *st, *scratch, *tmp;
    uint8_t *pad;
    size_t sper, xper;
};
#endif
