/* The fixture runner built in double precision (libmega64): float64 references must agree to
 * 1e-9 of each tensor's largest magnitude. */
#include "test_fixtures.c"
