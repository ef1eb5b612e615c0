/* The AFT / gMLP definition and streaming tests (tests/test_mixer_aft_stream.c) built in double
 * precision (libmega64): every comparison within 1e-12 of max |out|. */
#include "test_mixer_aft_stream.c"
