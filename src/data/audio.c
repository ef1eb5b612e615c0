/* Audio: WAV/FLAC read and WAV written through libsndfile (optional at build time, as MPI is:
 * the Makefile defines MEGA_USE_SNDFILE when it links it), and the Speech Commands layout as a
 * data format of real-valued sequences.
 *
 * Speech Commands v0.02 (Warden 2018, arXiv:1804.03209): DIR/<word>/<clip>.wav, 16 kHz mono
 * 16-bit PCM, at most one second; DIR/validation_list.txt and DIR/testing_list.txt name the clips
 * ("word/clip.wav") of the validation and test splits, every other clip is training data;
 * DIR/_background_noise_/ holds long noise recordings that are not examples. The official Mega
 * data (fairseq/data/audio/speech_commands_dataset.py, SpeechCommandsDataset._process_data) keeps
 * the ten words of SUBSET_CLASSES and drops clips shorter than 16,000 samples; its _process_all
 * (all 35 words) zero-pads them instead. */
#include "data/data.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef MEGA_USE_SNDFILE
#include <sndfile.h>
#endif

#define NOT_BUILT "this build reads no audio (libsndfile was not found when it was built: apt-get install libsndfile1-dev, then rebuild)"

int mega_audio_available(void) {
#ifdef MEGA_USE_SNDFILE
    return 1;
#else
    return 0;
#endif
}

#ifdef MEGA_USE_SNDFILE
/* the sample formats a clip may hold: 16-bit PCM (Speech Commands) or floating point */
static const char *subtype_ok(int format) {
    switch (format & SF_FORMAT_SUBMASK) {
    case SF_FORMAT_PCM_16: return "16-bit PCM";
    case SF_FORMAT_FLOAT: return "32-bit float";
    case SF_FORMAT_DOUBLE: return "64-bit float";
    default: return NULL;
    }
}

/* the data chunk a WAV header declares against what the file holds: libsndfile shortens a
 * truncated file's frame count silently (and notes it in its log), which would turn a cut
 * download into a short clip */
static int truncated(SNDFILE *f) {
    char log[4096];
    sf_command(f, SFC_GET_LOG_INFO, log, sizeof log);
    /* libsndfile 1.2 logs "data : 32000 (should be 9956)" for a cut data chunk */
    for (const char *d = strstr(log, "data :"); d; d = strstr(d + 1, "data :")) {
        const char *e = strchr(d, '\n');
        const char *s = strstr(d, "(should be");
        if (s && (!e || s < e)) return 1;
    }
    return strstr(log, "truncated") != NULL;
}
#endif

mega_status mega_audio_read(const char *path, int rate, int64_t max_samples, float **x, int64_t *n) {
    *x = NULL, *n = 0;
    MEGA_TRY(mega__data_given(path, "audio"));
    struct stat sb;
    if (stat(path, &sb) != 0) MEGA_FAIL(MEGA_ERR_NOT_FOUND, "audio file '%s': %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) MEGA_FAIL(MEGA_ERR_IO, "audio file '%s' is not a regular file", path);
#ifndef MEGA_USE_SNDFILE
    (void)rate, (void)max_samples;
    MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "audio file '%s': %s", path, NOT_BUILT);
#else
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *f = sf_open(path, SFM_READ, &info);
    if (!f) MEGA_FAIL(MEGA_ERR_FORMAT, "audio file '%s': %s", path, sf_strerror(NULL));
    mega_status st = MEGA_OK;
    const char *sub = subtype_ok(info.format);
    if (info.channels != 1)
        st = mega__error(MEGA_ERR_FORMAT, "audio file '%s' has %d channels; mono clips are expected", path, info.channels);
    else if (rate > 0 && info.samplerate != rate)
        st = mega__error(MEGA_ERR_FORMAT, "audio file '%s' is sampled at %d Hz; %d Hz is expected (resample it first)", path,
                         info.samplerate, rate);
    else if (!sub)
        st = mega__error(MEGA_ERR_FORMAT, "audio file '%s': sample format 0x%04x; 16-bit PCM or float is expected", path,
                         info.format & SF_FORMAT_SUBMASK);
    else if (info.frames < 1)
        st = mega__error(MEGA_ERR_FORMAT, "audio file '%s' holds no samples", path);
    else if (max_samples > 0 && info.frames > max_samples)
        st = mega__error(MEGA_ERR_FORMAT, "audio file '%s' has %lld samples, more than the %lld allowed", path,
                         (long long)info.frames, (long long)max_samples);
    else if (info.frames > ((int64_t)1 << 31))
        st = mega__error(MEGA_ERR_FORMAT, "audio file '%s' has %lld samples (too long)", path, (long long)info.frames);
    else if (truncated(f))
        st = mega__error(MEGA_ERR_FORMAT, "audio file '%s' is truncated (its header promises more samples than it holds)", path);
    float *buf = NULL;
    if (st == MEGA_OK && !(buf = malloc((size_t)info.frames * sizeof *buf)))
        st = mega__error(MEGA_ERR_OOM, "audio file '%s': out of memory", path);
    if (st == MEGA_OK) {
        const sf_count_t got = sf_readf_float(f, buf, info.frames);
        if (got != info.frames)
            st = mega__error(MEGA_ERR_FORMAT, "audio file '%s' is truncated (%lld of %lld samples read)", path, (long long)got,
                             (long long)info.frames);
        for (sf_count_t i = 0; st == MEGA_OK && i < got; i++)
            if (!isfinite(buf[i])) st = mega__error(MEGA_ERR_FORMAT, "audio file '%s': sample %lld is not finite", path, (long long)i);
    }
    sf_close(f);
    if (st != MEGA_OK) {
        free(buf);
        return st;
    }
    *x = buf, *n = info.frames;
    return MEGA_OK;
#endif
}

mega_status mega_audio_write(const char *path, const float *x, int64_t n, int rate) {
    MEGA_TRY(mega__data_given(path, "audio"));
    if (n < 1 || rate < 1) MEGA_FAIL(MEGA_ERR_INVALID, "audio file '%s': nothing to write (%lld samples at %d Hz)", path, (long long)n, rate);
#ifndef MEGA_USE_SNDFILE
    (void)x;
    MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "audio file '%s': %s", path, NOT_BUILT);
#else
    /* atomically: a temporary file next to it, renamed when complete */
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof tmp)
        MEGA_FAIL(MEGA_ERR_INVALID, "audio file '%s': path too long", path);
    SF_INFO info = {0, rate, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 0, 0};
    SNDFILE *f = sf_open(tmp, SFM_WRITE, &info);
    if (!f) MEGA_FAIL(MEGA_ERR_IO, "audio file '%s': %s", tmp, sf_strerror(NULL));
    /* clip instead of wrapping around (libsndfile's default for float to PCM) */
    sf_command(f, SFC_SET_CLIPPING, NULL, SF_TRUE);
    const sf_count_t put = sf_writef_float(f, x, n);
    const int err = sf_close(f);
    if (put != n || err) {
        unlink(tmp);
        MEGA_FAIL(MEGA_ERR_IO, "audio file '%s': write failed (%lld of %lld samples)", path, (long long)put, (long long)n);
    }
    if (rename(tmp, path) != 0) {
        const int e = errno;
        unlink(tmp);
        MEGA_FAIL(MEGA_ERR_IO, "audio file '%s': %s", path, strerror(e));
    }
    return MEGA_OK;
#endif
}

/* ---------------------------------------------------------------------------------------------
 * the Speech Commands layout */

/* the official word lists, in the official class order (SpeechCommandsDataset.SUBSET_CLASSES,
 * ALL_CLASSES) */
static const char *const SC10[] = {"yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"};
static const char *const SC35[] = {"bed", "cat", "down", "five", "forward", "go", "house", "left", "marvin", "no", "on", "right",
                                   "sheila", "tree", "up", "visual", "yes", "backward", "bird", "dog", "eight", "follow", "four",
                                   "happy", "learn", "nine", "off", "one", "seven", "six", "stop", "three", "two", "wow", "zero"};

const char *const *mega_speech_words(int all, int *n) {
    *n = all ? 35 : 10;
    return all ? SC35 : SC10;
}

/* a split list: its lines ("word/clip.wav"), sorted for bsearch */
typedef struct {
    char **line;
    int n;
    char *text;
} name_list;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static mega_status list_read(const char *dir, const char *name, name_list *l) {
    memset(l, 0, sizeof *l);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    if (stat(path, &sb) != 0) return MEGA_OK; /* no list: no clip is in that split */
    uint8_t *buf;
    size_t len;
    MEGA_TRY(mega__data_read_all(path, "split list", &buf, &len));
    int cap = 0;
    for (size_t i = 0; i < len; i++) cap += buf[i] == '\n';
    l->line = malloc((size_t)(cap + 1) * sizeof *l->line);
    if (!l->line) return free(buf), mega__error(MEGA_ERR_OOM, "out of memory");
    l->text = (char *)buf;
    for (char *s = l->text, *e; s < l->text + len; s = e + 1) {
        e = strchr(s, '\n');
        if (!e) e = l->text + len;
        *e = 0;
        size_t k = strlen(s);
        while (k && (s[k - 1] == '\r' || s[k - 1] == ' ')) s[--k] = 0;
        if (k) l->line[l->n++] = s;
    }
    qsort(l->line, (size_t)l->n, sizeof *l->line, cmp_str);
    return MEGA_OK;
}

static int list_has(const name_list *l, const char *key) {
    return l->n && bsearch(&key, l->line, (size_t)l->n, sizeof *l->line, cmp_str) != NULL;
}

static void list_free(name_list *l) {
    free(l->line), free(l->text);
    memset(l, 0, sizeof *l);
}

/* the .wav files of a folder, sorted (readdir's order depends on the file system) */
static mega_status wav_names(const char *path, char ***names, int *n) {
    *names = NULL, *n = 0;
    DIR *dp = opendir(path);
    if (!dp) return MEGA_OK; /* a word without a folder has no clips */
    int cap = 0;
    mega_status st = MEGA_OK;
    for (struct dirent *e; st == MEGA_OK && (e = readdir(dp));) {
        const size_t k = strlen(e->d_name);
        if (k < 5 || strcasecmp(e->d_name + k - 4, ".wav")) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 256;
            char **p = realloc(*names, (size_t)cap * sizeof *p);
            if (!p) st = mega__error(MEGA_ERR_OOM, "out of memory");
            else *names = p;
        }
        if (st == MEGA_OK && !((*names)[*n] = strdup(e->d_name))) st = mega__error(MEGA_ERR_OOM, "out of memory");
        if (st == MEGA_OK) (*n)++;
    }
    closedir(dp);
    if (*n) qsort(*names, (size_t)*n, sizeof **names, cmp_str);
    return st;
}

typedef struct {
    mega__builder *b;
    const char *dir;
    const name_list *valid, *test;
    int dropped, wavs;
} speech_walk;

/* the clips of one word that belong to the requested split */
static mega_status speech_word(speech_walk *w, const char *word, int label) {
    mega__builder *b = w->b;
    mega_dataset *d = b->d;
    const int split = b->o->split, L = MEGA_SPEECH_CLIP;
    char folder[4200], key[512], path[4800];
    snprintf(folder, sizeof folder, "%s/%s", w->dir, word);
    char **names;
    int n;
    mega_status st = wav_names(folder, &names, &n);
    float *clip = st == MEGA_OK ? calloc(L, sizeof *clip) : NULL;
    if (st == MEGA_OK && !clip) st = mega__error(MEGA_ERR_OOM, "out of memory");
    for (int i = 0; st == MEGA_OK && i < n; i++) {
        w->wavs++;
        snprintf(key, sizeof key, "%s/%s", word, names[i]);
        const int in = list_has(w->valid, key) ? 1 : list_has(w->test, key) ? 2 : 0;
        if (in != split) continue;
        if (b->o->max_examples > 0 && d->n >= b->o->max_examples) break;
        snprintf(path, sizeof path, "%s/%s", folder, names[i]);
        float *x;
        int64_t len;
        if ((st = mega_audio_read(path, MEGA_SPEECH_RATE, L, &x, &len)) != MEGA_OK) break;
        if (len < L && !b->o->pad_short) {
            free(x);
            w->dropped++;
            continue;
        }
        memcpy(clip, x, (size_t)len * sizeof *x);
        memset(clip + len, 0, (size_t)(L - len) * sizeof *clip);
        free(x);
        if ((st = mega__builder_grow(b, 0)) != MEGA_OK) break;
        if ((st = mega__builder_put_reals(b, clip, (size_t)L, &b->off[d->n], &d->len[d->n])) != MEGA_OK) break;
        d->line[d->n] = d->n + 1, b->ex_lab[d->n] = label;
        d->n++;
    }
    free(clip);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

/* the clips named by a split list must exist (a list naming missing clips is a broken corpus) */
static mega_status list_check(const char *dir, const char *name, const name_list *l) {
    char path[4800];
    struct stat sb;
    for (int i = 0; i < l->n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, l->line[i]);
        if (stat(path, &sb) != 0)
            MEGA_FAIL(MEGA_ERR_FORMAT, "%s/%s names '%s', which does not exist", dir, name, l->line[i]);
    }
    return MEGA_OK;
}

mega_status mega_dataset_load_speech(const char *dir, const mega_data_opts *opts, mega_dataset *d) {
    mega_data_opts def;
    if (!opts) memset(&def, 0, sizeof def), opts = &def;
    memset(d, 0, sizeof *d);
    MEGA_TRY(mega__data_given(dir, "speech data"));
    struct stat sb;
    if (stat(dir, &sb) != 0) MEGA_FAIL(MEGA_ERR_NOT_FOUND, "speech data '%s': %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        MEGA_FAIL(MEGA_ERR_FORMAT, "speech data '%s' is not a directory (the Speech Commands layout: one folder per word)", dir);
    if (opts->split < 0 || opts->split > 2) MEGA_FAIL(MEGA_ERR_INVALID, "speech data: split %d (0, 1 or 2)", opts->split);
    if (!mega_audio_available()) MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "speech data '%s': %s", dir, NOT_BUILT);
    mega__builder b;
    name_list valid, test;
    memset(&valid, 0, sizeof valid), memset(&test, 0, sizeof test);
    mega_status st = mega__builder_init(&b, dir, opts, d);
    if (st == MEGA_OK) {
        d->audio_rate = MEGA_SPEECH_RATE;
        d->vocab.kind = MEGA_VOCAB_BYTES, d->vocab.pad = d->vocab.unk = -1, d->vocab.real = 1, d->vocab.std = 1;
        st = list_read(dir, "validation_list.txt", &valid);
    }
    if (st == MEGA_OK && (st = list_read(dir, "testing_list.txt", &test)) == MEGA_OK &&
        (st = list_check(dir, "validation_list.txt", &valid)) == MEGA_OK)
        st = list_check(dir, "testing_list.txt", &test);
    int nw;
    const char *const *words = mega_speech_words(opts->all_words, &nw);
    speech_walk w = {&b, dir, &valid, &test, 0, 0};
    /* the classes: the word list in the official order (every word registered as label i) */
    for (int i = 0; st == MEGA_OK && i < nw; i++) {
        int li;
        st = mega__builder_label(&b, words[i], strlen(words[i]), 0, &li);
    }
    for (int i = 0; st == MEGA_OK && i < nw; i++) st = speech_word(&w, words[i], i);
    if (st == MEGA_OK && w.wavs == 0)
        st = mega__error(MEGA_ERR_FORMAT, "speech data '%s': no .wav files in any of the %d word folders (%s, ...)", dir, nw, words[0]);
    /* a held-out split is what its list names: none without the list (or an empty one) */
    const name_list *held = opts->split == 1 ? &valid : opts->split == 2 ? &test : NULL;
    if (st == MEGA_OK && d->n == 0)
        st = mega__error(MEGA_ERR_FORMAT, "speech data '%s': no %s clips of 16,000 samples%s%s%s", dir,
                         opts->split == 0 ? "training" : opts->split == 1 ? "validation" : "test",
                         w.dropped ? " (shorter clips are dropped; see --pad-short)" : "",
                         held && held->n == 0 ? " (no clip named by its " : "",
                         held && held->n == 0 ? (opts->split == 1 ? "validation_list.txt)" : "testing_list.txt)") : "");
    if (st == MEGA_OK) {
        mega_classes fixed = {nw, (char **)words};
        st = mega__builder_finish(&b, opts->classes ? NULL : &fixed);
    }
    list_free(&valid), list_free(&test);
    mega__builder_free(&b);
    if (st != MEGA_OK) mega_dataset_free(d);
    return st;
}
