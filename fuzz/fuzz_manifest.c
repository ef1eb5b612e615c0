/* The checkpoint manifests of a run directory (docs/checkpoints.md): the input is written as
 * step-00000002.manifest.json next to a complete generation 1 (its model and state files and a
 * valid manifest), then read by the two readers of manifests: `mega train --resume`'s choice of
 * generation (ckpt_latest, tools/ckpt.c: manifest, both files' sizes and FNV-1a checksums) and the
 * library's mega_model_file (a run directory given as --model: the newest generation whose model
 * file matches its manifest).
 * Byte 0 of the input: bit 0 writes generation 2's model file, bit 1 its state file (the file
 * contents are fixed, so a manifest can name them with their true sizes and checksums); the rest
 * is the manifest. Invariants: whatever the manifest holds, both readers succeed (generation 1 is
 * complete), choose generation 2 or 1, and name files that exist. */
#include "fuzz_common.h"

#include "../tools/ckpt.h"

static const char MODEL1[] = "model bytes of generation 1", STATE1[] = "state bytes of generation 1";
static const char MODEL2[] = "model bytes of generation 2", STATE2[] = "state bytes of generation 2";

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* the run directory: its own directory under the fuzzing directory (the files need their exact
 * names, which fz_write prefixes), removed at exit */
static char run_dir[600];
static void run_cleanup(void) {
    static const char *const names[] = {"step-00000001.model.safetensors", "step-00000001.state.safetensors",
                                        "step-00000001.manifest.json",     "step-00000002.model.safetensors",
                                        "step-00000002.state.safetensors", "step-00000002.manifest.json"};
    char p[700];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/%s", run_dir, names[i]);
        unlink(p);
    }
    rmdir(run_dir);
}
static const char *put(const char *name, const void *data, size_t n) {
    if (!run_dir[0]) {
        snprintf(run_dir, sizeof run_dir, "%s/run_%d", fz_dir(), (int)getpid());
        mkdir(run_dir, 0700);
        atexit(run_cleanup);
    }
    static char path[700];
    snprintf(path, sizeof path, "%s/%s", run_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) abort();
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    const unsigned opt = fz_byte(&in);
    static char man1[1024];
    if (!man1[0])
        snprintf(man1, sizeof man1,
                 "{\"format\": \"mega-checkpoint 1\", \"step\": 1, \"task\": \"lm\", "
                 "\"model\": {\"file\": \"step-00000001.model.safetensors\", \"bytes\": %zu, \"fnv1a64\": \"%016llx\"}, "
                 "\"state\": {\"file\": \"step-00000001.state.safetensors\", \"bytes\": %zu, \"fnv1a64\": \"%016llx\"}}",
                 sizeof MODEL1 - 1, (unsigned long long)mega_fnv1a64(MODEL1, sizeof MODEL1 - 1), sizeof STATE1 - 1,
                 (unsigned long long)mega_fnv1a64(STATE1, sizeof STATE1 - 1));
    put("step-00000001.model.safetensors", MODEL1, sizeof MODEL1 - 1);
    put("step-00000001.state.safetensors", STATE1, sizeof STATE1 - 1);
    put("step-00000001.manifest.json", man1, strlen(man1));
    /* generation 2: each file present or absent */
    const char *m2 = put("step-00000002.model.safetensors", MODEL2, sizeof MODEL2 - 1);
    if (!(opt & 1)) unlink(m2);
    const char *s2 = put("step-00000002.state.safetensors", STATE2, sizeof STATE2 - 1);
    if (!(opt & 2)) unlink(s2);
    put("step-00000002.manifest.json", in.p, in.n);
    const char *dir = run_dir;

    ckpt_gen g;
    int n_manifests = 0;
    const int rc = ckpt_latest(dir, &g, &n_manifests);
    FZ_CHECK(rc == 0 && n_manifests == 2);
    FZ_CHECK(g.step == 1 || g.step == 2);
    FZ_CHECK(exists(g.model) && exists(g.state));
    if (g.step == 2) FZ_CHECK((opt & 3) == 3); /* generation 2 is complete only with both files */

    char buf[4096];
    FZ_CHECK(mega_model_file(dir, buf, sizeof buf) == MEGA_OK);
    FZ_CHECK(exists(buf));
    return 0;
}
