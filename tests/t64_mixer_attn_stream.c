/* The attention-mixer streaming tests (tests/test_mixer_attn_stream.c) built in double precision
 * (libmega64): the step must match the full forward to 1e-12 of max |out|. */
#include "test_mixer_attn_stream.c"
