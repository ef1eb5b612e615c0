/* mega quantize: a model with its projection and embedding matrices in q8_0 blocks
 * (docs/quantization.md; the format and its loading in src/model/quant.c) */
#include "common.h"
#include "models.h"
#include <string.h>
#include <sys/stat.h>

static double file_mb(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (double)sb.st_size / 1e6 : 0;
}

int cmd_quantize(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *type = "q8_0";
    cli_flag fl[] = {{"model", F_STR, &model, "the float32 model: checkpoint directory (or model.safetensors)", NULL, 1, 0, 0},
                     {"out", F_STR, &out, "the quantized model file to write (a directory: its model.safetensors)", NULL, 1, 0, 0},
                     {"type", F_STR, &type, "quantization: q8_0 (blocks of 32 int8 weights and an fp16 scale)", NULL, 1, 0, 0},
                     FL_END};
    int r = cli_parse("quantize", "--model RUN --out RUN-q8 [--type q8_0]", fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!model || !out) return cli_error("--model and --out are required (see 'mega quantize --help')"), 2;
    char in[4096], dst[4096];
    /* the file mega eval and mega generate read by default (a run directory's best.safetensors) */
    if (mega_model_file_which(model, "best", in, sizeof in) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    /* --out names a run directory (made here) or a file */
    struct stat sb;
    const size_t ol = strlen(out);
    const int is_dir = (stat(out, &sb) == 0 && S_ISDIR(sb.st_mode)) || (ol && out[ol - 1] == '/') ||
                       (ol < 12 || strcmp(out + ol - 12, ".safetensors"));
    if (is_dir) {
        if (stat(out, &sb) != 0 && mkdir(out, 0777) != 0) return cli_error("cannot create directory %s", out), 2;
        path_join(dst, sizeof dst, out, "model.safetensors");
    } else {
        snprintf(dst, sizeof dst, "%s", out);
    }
    size_t n = 0;
    if (mega_model_quantize(in, dst, type, &n) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    printf("quantized  %s -> %s: %zu matrices in %s, %.2f MB -> %.2f MB (%.3fx)\n", in, dst, n, type, file_mb(in),
           file_mb(dst), file_mb(in) > 0 ? file_mb(dst) / file_mb(in) : 0);
    return 0;
}
