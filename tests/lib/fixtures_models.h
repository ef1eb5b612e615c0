/* Fixture runners for the model kinds ("lm", "cls"); return 1 when the case ran. */
#ifndef MEGA_FIXTURES_MODELS_H
#define MEGA_FIXTURES_MODELS_H
#include "fixtures_common.h"
int mega_fixture_run_lm(fx_case *c);
int mega_fixture_run_cls(fx_case *c);
int mega_fixture_run_s2s(fx_case *c);
#endif
