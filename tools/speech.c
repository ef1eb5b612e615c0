/* `mega speech-synth`: a keyword corpus in the Speech Commands layout, spoken by espeak-ng.
 *
 * Every clip is one word synthesized by the espeak-ng program (formant synthesis, 22,050 Hz),
 * resampled to 16 kHz, its silence trimmed, scaled to a random loudness, placed at a random
 * offset within one second (16,000 samples) and mixed with noise at a random signal-to-noise
 * ratio. A "speaker" is one espeak-ng voice (an English accent) with one voice variant (+m3,
 * +f2, +croak, ...); each clip also draws its speed and pitch. The split follows the speakers,
 * as Speech Commands' lists do: the speakers of validation_list.txt and testing_list.txt never
 * speak in the training clips. File names follow the corpus: <word>/<speaker>_nohash_<k>.wav.
 * docs/speech.md says how this differs from recorded speech. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* accents x variants = speakers (espeak-ng --voices=en, --voices=variant) */
static const char *const ACCENTS[] = {"en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029"};
static const char *const VARIANTS[] = {"m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5", "croak",
                                       "klatt", "klatt2", "klatt3", "klatt4", "Alex", "Andy", "Annie", "aunty", "boris",
                                       "david", "ed", "iven", "john", "linda", "max", "paul", "quincy", "rob", "steph",
                                       "travis", "victor", "zac", "grandma"};
#define N_ACCENTS ((int)(sizeof ACCENTS / sizeof *ACCENTS))
#define N_VARIANTS ((int)(sizeof VARIANTS / sizeof *VARIANTS))
#define N_SPEAKERS (N_ACCENTS * N_VARIANTS)
#define ESPEAK_RATE 22050

static double uniform(uint64_t *s) { return (double)mega_data_rng_below(s, (uint64_t)1 << 53) / 9007199254740992.0; }
static double gauss(uint64_t *s) {
    const double u = uniform(s) + 1e-12, v = uniform(s);
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

/* espeak-ng -v VOICE -s SPEED -p PITCH -w OUT WORD, without a shell */
static int espeak(const char *voice, int speed, int pitch, const char *out, const char *word) {
    char sp[16], pi[16];
    snprintf(sp, sizeof sp, "%d", speed), snprintf(pi, sizeof pi, "%d", pitch);
    char *const args[] = {"espeak-ng", "-v", (char *)voice, "-s", sp, "-p", pi, "-w", (char *)out, (char *)word, NULL};
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    int e = posix_spawnp(&pid, "espeak-ng", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e) return cli_error("cannot run espeak-ng: %s (apt-get install espeak-ng)", strerror(e));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return cli_error("espeak-ng: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 127) return cli_error("cannot run espeak-ng (apt-get install espeak-ng)");
    if (WEXITSTATUS(status)) return cli_error("espeak-ng -v %s failed on '%s' (exit %d)", voice, word, WEXITSTATUS(status));
    return 0;
}

/* windowed-sinc resampling from rate a to rate b (b < a: the kernel is the low-pass at b/2) */
static float *resample(const float *x, int64_t n, int a, int b, int64_t *m) {
    const int64_t out = n * b / a;
    float *y = malloc((size_t)(out > 0 ? out : 1) * sizeof *y);
    if (!y) return NULL;
    const double fc = 0.95 * (double)b / a; /* cutoff as a fraction of the input rate's Nyquist */
    const int K = 24;
    for (int64_t i = 0; i < out; i++) {
        const double t = (double)i * a / b;
        const int64_t c = (int64_t)floor(t);
        double s = 0;
        for (int64_t k = c - K + 1; k <= c + K; k++) {
            if (k < 0 || k >= n) continue;
            const double u = t - (double)k, w = 0.5 + 0.5 * cos(M_PI * u / K);
            s += x[k] * (fabs(u) < 1e-9 ? fc : sin(M_PI * fc * u) / (M_PI * u)) * w;
        }
        y[i] = (float)s;
    }
    *m = out;
    return y;
}

/* one clip: the word by a speaker, resampled, trimmed, loudness, offset, noise */
static int make_clip(const char *word, int speaker, uint64_t *rng, const char *tmp, float *clip) {
    char voice[64];
    snprintf(voice, sizeof voice, "%s+%s", ACCENTS[speaker / N_VARIANTS], VARIANTS[speaker % N_VARIANTS]);
    const int speed = 110 + (int)mega_data_rng_below(rng, 111); /* words per minute */
    const int pitch = 15 + (int)mega_data_rng_below(rng, 71);
    if (espeak(voice, speed, pitch, tmp, word)) return 1;
    float *x, *y;
    int64_t n, m;
    if (mega_audio_read(tmp, ESPEAK_RATE, 0, &x, &n) != MEGA_OK) return cli_error("%s", mega_last_error());
    y = resample(x, n, ESPEAK_RATE, MEGA_SPEECH_RATE, &m);
    free(x);
    if (!y) return cli_error("out of memory");
    /* trim the silence espeak-ng leaves around the word */
    float peak = 0;
    for (int64_t i = 0; i < m; i++) peak = fmaxf(peak, fabsf(y[i]));
    int64_t a = 0, b = m;
    while (a < m && fabsf(y[a]) < 0.02f * peak) a++;
    while (b > a && fabsf(y[b - 1]) < 0.02f * peak) b--;
    int64_t len = b - a;
    if (len > MEGA_SPEECH_CLIP) len = MEGA_SPEECH_CLIP;
    const int64_t off = len < MEGA_SPEECH_CLIP ? (int64_t)mega_data_rng_below(rng, (uint64_t)(MEGA_SPEECH_CLIP - len + 1)) : 0;
    const double gain = (peak > 0 ? 1.0 / peak : 1.0) * pow(10.0, -(3 + 21 * uniform(rng)) / 20); /* peak -3..-24 dBFS */
    double power = 0;
    for (int64_t i = 0; i < len; i++) power += (double)y[a + i] * y[a + i] * gain * gain;
    power = len ? power / (double)len : 0;
    /* noise: white and low-frequency (a leaky integral), at 5..40 dB below the word's power */
    const double snr = 5 + 35 * uniform(rng), sigma = sqrt(power / pow(10.0, snr / 10)), mix = uniform(rng);
    double brown = 0;
    for (int i = 0; i < MEGA_SPEECH_CLIP; i++) {
        brown = 0.98 * brown + 0.2 * gauss(rng);
        const double v = (i >= off && i < off + len) ? y[a + (i - off)] * gain : 0;
        clip[i] = (float)(v + sigma * ((1 - mix) * gauss(rng) + mix * brown));
    }
    free(y);
    return 0;
}

/* a split list: "word/name" per line */
static int write_list(const char *out, const char *name, char **lines, int n) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", out, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return cli_error("cannot write '%s': %s", tmp, strerror(errno));
    for (int i = 0; i < n; i++) fprintf(f, "%s\n", lines[i]);
    if (fclose(f) || rename(tmp, path)) return unlink(tmp), cli_error("cannot write '%s': %s", path, strerror(errno));
    return 0;
}

typedef struct {
    const char *out, *words;
    int64_t per_word, seed;
    int quiet, n_words;
} synth_args;

/* the held-out speakers: every 5th is a test speaker, the one after it a validation speaker */
static int split_of(int speaker) { return speaker % 5 == 4 ? 2 : speaker % 5 == 3 ? 1 : 0; }

static int synth(const synth_args *s) {
    int nw;
    const char *const *words = mega_speech_words(!strcmp(s->words, "all"), &nw);
    if (s->n_words > 0 && s->n_words < nw) nw = s->n_words; /* the first words of the official order */
    char tmp[4200], dir[4200], path[4400];
    snprintf(tmp, sizeof tmp, "%s/.espeak%ld.wav", s->out, (long)getpid());
    uint64_t rng = mega_data_rng_seed((uint64_t)s->seed);
    const int64_t total = s->per_word * nw;
    char **lists[3];
    int nl[3] = {0, 0, 0}, rc = 0;
    for (int k = 0; k < 3; k++) lists[k] = calloc((size_t)total, sizeof(char *));
    float *clip = malloc(MEGA_SPEECH_CLIP * sizeof *clip);
    if (!lists[0] || !lists[1] || !lists[2] || !clip) rc = cli_error("out of memory");
    double t0 = now_sec();
    for (int w = 0; !rc && w < nw; w++) {
        snprintf(dir, sizeof dir, "%s/%s", s->out, words[w]);
        if (ensure_dir(dir)) rc = 1;
        for (int64_t k = 0; !rc && k < s->per_word; k++) {
            const int speaker = (int)mega_data_rng_below(&rng, N_SPEAKERS);
            char name[128];
            snprintf(name, sizeof name, "%s/%s-%s_nohash_%lld.wav", words[w], ACCENTS[speaker / N_VARIANTS],
                     VARIANTS[speaker % N_VARIANTS], (long long)k);
            snprintf(path, sizeof path, "%s/%s", s->out, name);
            if ((rc = make_clip(words[w], speaker, &rng, tmp, clip))) break;
            if (mega_audio_write(path, clip, MEGA_SPEECH_CLIP, MEGA_SPEECH_RATE) != MEGA_OK) {
                rc = cli_error("%s", mega_last_error());
                break;
            }
            const int sp = split_of(speaker);
            if (!(lists[sp][nl[sp]++] = strdup(name))) rc = cli_error("out of memory");
        }
        if (!s->quiet) fprintf(stderr, "\r%s: %d/%d words", s->out, w + 1, nw);
    }
    if (!s->quiet) fprintf(stderr, "\n");
    unlink(tmp);
    if (!rc) rc = write_list(s->out, "validation_list.txt", lists[1], nl[1]) || write_list(s->out, "testing_list.txt", lists[2], nl[2]);
    if (!rc)
        printf("wrote %s: %lld clips of %d words (%d training, %d validation, %d test; %d speakers) in %.1fs, seed %lld\n", s->out,
               (long long)total, nw, nl[0], nl[1], nl[2], N_SPEAKERS, now_sec() - t0, (long long)s->seed);
    for (int k = 0; k < 3; k++) {
        for (int i = 0; lists[k] && i < nl[k]; i++) free(lists[k][i]);
        free(lists[k]);
    }
    free(clip);
    return rc;
}

int cmd_speech_synth(int argc, char **argv) {
    synth_args s = {NULL, "sc10", 100, 1, 0, 0};
    cli_flag fl[] = {
        {"out", F_STR, &s.out, "output directory (created if missing): <word>/*.wav, validation_list.txt, testing_list.txt", NULL, 1, 0, 0},
        {"words", F_ENUM, &s.words, "the ten words of SC10 or all 35 of Speech Commands", "sc10|all", 1, 0, 0},
        {"n-words", F_INT, &s.n_words, "only the first N words of the list (0 = all): a smaller task", NULL, 0, 35, 0},
        {"per-word", F_I64, &s.per_word, "clips per word", NULL, 1, 1e6, 0},
        {"seed", F_I64, &s.seed, "seed of the speakers, speeds, pitches, offsets and noise", NULL, 0, 9007199254740991.0, 0},
        {"quiet", F_SET, &s.quiet, "no progress on stderr", NULL, 1, 0, 0},
        FL_END};
    const char *usage = "--out DIR [--words sc10|all] [--n-words N] [--per-word N] [--seed S]\n\n"
                        "Writes spoken keywords synthesized with espeak-ng in the Speech Commands layout (16 kHz mono\n"
                        "16-bit WAV, one second each), with validation and test speakers that never occur in the\n"
                        "training clips; 'mega train --task classify --preset sc-raw --data DIR' reads it (docs/speech.md).";
    int r = cli_parse("speech-synth", usage, fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!s.out || !*s.out) return cli_error("--out DIR is required (see 'mega speech-synth --help')"), 2;
    if (strlen(s.out) > 4000) return cli_error("--out: path too long"), 2;
    if (!mega_audio_available()) return cli_error("speech-synth: this build writes no audio (libsndfile was not found when it was built)"), 2;
    if (ensure_dir(s.out)) return 2;
    return synth(&s) ? 2 : 0;
}
