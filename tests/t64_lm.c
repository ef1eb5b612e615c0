/* The LM tests (tests/test_lm.c) built in double precision (libmega64): streamed logits must
 * match the full forward to 1e-10 of max |logit|. */
#include "test_lm.c"
