/* The table of data formats: one row per format, with its name (the CLI's --format and the
 * checkpoints' "data-format"), its help, the CLI flags of its files, its detector and its
 * loader. The CLI builds its --format choices, the help and the checks of --data/--images/--labels
 * from these rows; mega_dataset_load and mega_data_detect read nothing else. */
#include "data/data.h"

#include <strings.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------------------------------------
 * detectors: the first line of the file, without its newline */
static int tabs_in(const char *s, size_t n) {
    int t = 0;
    for (size_t i = 0; i < n; i++) t += s[i] == '\t';
    return t;
}
static int detect_listops(const char *s, size_t n) { return n >= 7 && !strncmp(s, "Source\t", 7); }
static int detect_text(const char *s, size_t n) { return tabs_in(s, n) < 2; }
static int detect_pairs(const char *s, size_t n) { return tabs_in(s, n) >= 2; }

/* ---------------------------------------------------------------------------------------------
 * loaders on the (one or two) paths of a row */
static mega_status load_listops(const char *const p[2], const mega_data_opts *o, mega_dataset *d) {
    return mega_dataset_load_listops(p[0], o, d);
}
static mega_status load_text(const char *const p[2], const mega_data_opts *o, mega_dataset *d) {
    return mega_dataset_load_text(p[0], o, d);
}
static mega_status load_pairs(const char *const p[2], const mega_data_opts *o, mega_dataset *d) {
    return mega_dataset_load_pairs(p[0], o, d);
}
static mega_status load_idx(const char *const p[2], const mega_data_opts *o, mega_dataset *d) {
    return mega_dataset_load_idx(p[0], p[1], o, d);
}
static mega_status load_pathfinder(const char *const p[2], const mega_data_opts *o, mega_dataset *d) {
    return mega_dataset_load_pathfinder(p[0], o, d);
}
static mega_status load_real(const char *const p[2], const mega_data_opts *o, mega_dataset *d) {
    return mega_dataset_load_real(p[0], o, d);
}

static mega_status load_lra_image(const char *const p[2], const mega_data_opts *o, mega_dataset *d) {
    return mega_dataset_load_lra_image(p[0], o, d);
}
static mega_status load_speech(const char *const p[2], const mega_data_opts *o, mega_dataset *d) {
    return mega_dataset_load_speech(p[0], o, d);
}

/* In detection order: a ListOps header, then text (fewer than two TABs) before pairs. IDX is
 * chosen by its flags, real by name (a line of numbers is also a valid text line). */
static const mega_data_format_info formats[] = {
    {MEGA_DATA_LISTOPS, "listops", "ListOps", "ListOps TSV: header \"Source<TAB>Target\", then expression<TAB>digit", {"data", NULL},
     {"training data (a TSV; see --format)", NULL}, detect_listops, load_listops},
    {MEGA_DATA_TEXT, "text", "text", "label<TAB>text per line, the text as bytes", {"data", NULL}, {"training data (a TSV; see --format)", NULL},
     detect_text, load_text},
    {MEGA_DATA_PAIRS, "pairs", "pairs", "label<TAB>text1<TAB>text2 per line (or the AAN label, id1, id2, text1, text2)", {"data", NULL},
     {"training data (a TSV; see --format)", NULL}, detect_pairs, load_pairs},
    {MEGA_DATA_IDX, "idx", "IDX", "IDX images and labels (the MNIST format; .gz read as published)", {"images", "labels"},
     {"IDX image file (the MNIST format; .gz read as published)", "IDX label file"}, NULL, load_idx},
    {MEGA_DATA_REAL, "real", "real-valued", "label, then real values separated by commas or spaces, per line (for --embedding real)",
     {"data", NULL}, {"training data (a TSV; see --format)", NULL}, NULL, load_real},
    {MEGA_DATA_PATHFINDER, "pathfinder", "Pathfinder", "a directory in the layout of the LRA Pathfinder release: metadata/<k>.npy lines naming grayscale PNGs (mega pathfinder)",
     {"data", NULL}, {"training data (a TSV, or a directory; see --format)", NULL}, NULL, load_pathfinder},
    {MEGA_DATA_SPEECH, "speech", "speech", "a Speech Commands directory: one folder of 16 kHz mono WAV clips per word, validation_list.txt, testing_list.txt",
     {"data", NULL}, {"training data (a TSV, or a directory for --format speech)", NULL}, NULL, load_speech},
    {MEGA_DATA_LRA_IMAGE, "lra-image", "LRA image", "a directory in the official LRA image layout: input/SPLIT.src (pixels 0..255 per line), label/SPLIT.label (one class per line)",
     {"data", NULL}, {"training data (a TSV, or a directory; see --format)", NULL}, NULL, load_lra_image},
};
#define N_FORMATS ((int)(sizeof formats / sizeof *formats))

const mega_data_format_info *mega_data_formats(int *n) {
    *n = N_FORMATS;
    return formats;
}

const mega_data_format_info *mega_data_format_row(mega_data_format f) {
    for (int i = 0; i < N_FORMATS; i++)
        if (formats[i].id == f) return &formats[i];
    return NULL;
}

const char *mega_data_format_name(mega_data_format f) {
    const mega_data_format_info *r = mega_data_format_row(f);
    return f == MEGA_DATA_AUTO ? "auto" : r ? r->name : "?";
}

int mega_data_format_parse(const char *s, mega_data_format *f) {
    if (!s) return -1;
    if (!strcmp(s, "auto")) return *f = MEGA_DATA_AUTO, 0;
    for (int i = 0; i < N_FORMATS; i++)
        if (!strcmp(s, formats[i].name)) return *f = formats[i].id, 0;
    return -1;
}

mega_data_format mega_data_detect(const char *path) {
    if (mega__pathfinder_dir(path)) return MEGA_DATA_PATHFINDER; /* a directory: its layout */
    if (mega__lra_image_dir(path) || mega__lra_image_split(path)) return MEGA_DATA_LRA_IMAGE;
    FILE *f; /* regular files only (never blocks on a FIFO); the loader reports what is wrong */
    if (mega__data_open(path, "data", &f) != MEGA_OK) return MEGA_DATA_TEXT;
    char line[8192];
    mega_data_format fmt = MEGA_DATA_TEXT;
    if (fgets(line, sizeof line, f)) {
        const size_t n = strcspn(line, "\n");
        for (int i = 0; i < N_FORMATS; i++)
            if (formats[i].detect && formats[i].detect(line, n)) {
                fmt = formats[i].id;
                break;
            }
    }
    fclose(f);
    return fmt;
}

/* the row a call names: the format, else the row whose second file is given without --data
 * (IDX from --images), else the detected one */
static const mega_data_format_info *load_row(mega_data_format format, const char *data, const char *more) {
    if (!data && more)
        for (int i = 0; i < N_FORMATS; i++)
            if (formats[i].flag[1]) return &formats[i];
    struct stat sb; /* a directory: the Pathfinder layout (metadata/), the LRA image layout (input/ and
                     * label/), else a Speech Commands corpus */
    if (format == MEGA_DATA_AUTO && data && !stat(data, &sb) && S_ISDIR(sb.st_mode))
        format = mega__pathfinder_dir(data)  ? MEGA_DATA_PATHFINDER
                 : mega__lra_image_dir(data) ? MEGA_DATA_LRA_IMAGE
                                             : MEGA_DATA_SPEECH;
    if (format == MEGA_DATA_AUTO && data) format = mega_data_detect(data);
    return mega_data_format_row(format == MEGA_DATA_AUTO ? MEGA_DATA_TEXT : format);
}

mega_status mega_dataset_load(mega_data_format format, const char *data, const char *images, const char *labels,
                              const mega_data_opts *opts, mega_dataset *d) {
    memset(d, 0, sizeof *d);
    const mega_data_format_info *r = load_row(format, data, images);
    if (!r) MEGA_FAIL(MEGA_ERR_INVALID, "unknown data format %d", (int)format);
    if (r->flag[1]) {
        const char *const p[2] = {images, labels};
        if (!images || !labels)
            MEGA_FAIL(MEGA_ERR_INVALID, "%s data needs both --%s and --%s", r->what, r->flag[0], r->flag[1]);
        return r->load(p, opts, d);
    }
    const char *const p[2] = {data, NULL};
    if (!data) MEGA_FAIL(MEGA_ERR_INVALID, "--%s FILE is required", r->flag[0]);
    return r->load(p, opts, d);
}

mega_data_format mega_dataset_format(const mega_dataset *d) {
    if (d->png_dir) return MEGA_DATA_PATHFINDER;
    if (d->pixel_lines) return MEGA_DATA_LRA_IMAGE;
    if (d->audio_rate) return MEGA_DATA_SPEECH;
    if (d->val) return MEGA_DATA_REAL;
    if (d->pairs) return MEGA_DATA_PAIRS;
    if (d->rows) return MEGA_DATA_IDX;
    return d->vocab.kind == MEGA_VOCAB_LISTOPS ? MEGA_DATA_LISTOPS : MEGA_DATA_TEXT;
}
