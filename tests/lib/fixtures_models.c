#include "fixtures_models.h"
/* The language-model and classifier wrappers arrive with their issues; until then their cases
 * are reported as not run (never as passed). */
int mega_fixture_run_lm(fx_case *c) {
    printf("NOTE %s: kind lm not run (language model not built yet)\n", c->name);
    return 0;
}
int mega_fixture_run_cls(fx_case *c) {
    printf("NOTE %s: kind cls not run (classifier not built yet)\n", c->name);
    return 0;
}
