/*
 * The run directory of `mega train` (docs/checkpoints.md): one writer at a time, and checkpoint
 * generations that survive a crash at any point, any number of times in a row.
 *
 *   train.lock                       flock'ed by the one mega train writing here (holds its pid)
 *   step-<N>.model.safetensors       the weights at step N      } one generation per save,
 *   step-<N>.state.safetensors       the optimizer state at N   } N zero-padded to 8 digits
 *   step-<N>.manifest.json           written last: both files' sizes and FNV-1a checksums
 *   model.safetensors                copies of the newest complete generation (stable names
 *   train_state.safetensors          for eval/generate/PyTorch), replaced after its manifest
 *   checkpoint.json                  {"step", "task", "model", "state", "manifest"}
 *   best.safetensors                 the model of the best validation so far (train.c)
 *
 * A generation is complete when its manifest parses and both files have the recorded size and
 * checksum; the newest complete one is the checkpoint. Every file is written through
 * mega_write_file_atomic (temporary file, fsync, rename, directory fsync), so every write is a
 * fault point of MEGA_FAULT (src/core/fileio.c). Functions print their errors (cli_error) and
 * return non-zero.
 */
#ifndef MEGA_TOOLS_CKPT_H
#define MEGA_TOOLS_CKPT_H
#include "common.h"

/* one generation: its step, the task recorded in its manifest, and its two files with their
 * sizes and checksums */
typedef struct {
    int64_t step;
    char task[32];
    char model[4096], state[4096];
    uint64_t model_bytes, model_sum, state_bytes, state_sum;
} ckpt_gen;

/* the paths of generation `step`'s model and state files in dir */
void ckpt_paths(const char *dir, int64_t step, char *model, char *state, size_t n);

/* open(path, flags) for a file of the run directory (the lock, the log), never through a symbolic
 * link, close-on-exec (0644 when created): the descriptor; -1 with errno ELOOP after the error
 * ("'PATH' is a symbolic link: ..."), or -1 with another errno for the caller to report. */
int run_open(const char *path, int flags);
/* that error for path (a link found by lstat); 1 */
int run_link_error(const char *path);
/* Hold dir's lock (train.lock) until the process ends; 0, or 1 after the error (another mega
 * train holds it: "'DIR' is in use by another mega train (pid N)"). */
int run_lock(const char *dir);
/* whether dir holds a checkpoint of a run: a manifest, model.safetensors, a train_state file or
 * checkpoint.json */
int run_has_checkpoint(const char *dir);
/* --force: remove the files of the run in dir (checkpoints and best.safetensors first, then log.jsonl and curves.svg);
 * other files stay */
int run_wipe(const char *dir);
/* remove temporary files (NAME.tmp.PID) left by processes that no longer run */
void run_clean_temps(const char *dir);

/* The newest complete generation of dir into *g: 0; 1 when there is none (*n_manifests tells
 * whether there were manifests at all). Each newer generation that is not complete gets a note
 * on stderr ("skipping the checkpoint at step N: ...") with the reason. */
int ckpt_latest(const char *dir, ckpt_gen *g, int *n_manifests);
/* Make dir agree with generation g before training continues from it: remove newer (incomplete)
 * generations, older ones beyond `keep` (g counts) and files of no generation, then restore
 * model.safetensors, train_state.safetensors and checkpoint.json when they differ from g. */
int ckpt_adopt(const char *dir, const ckpt_gen *g, int keep);
/* After the generation's two files (ckpt_paths) are written: check them back, write the manifest
 * (train_json is stored in it), replace the stable copies, remove all but the newest `keep`
 * generations, and rewrite checkpoint.json. */
int ckpt_commit(const char *dir, int64_t step, const char *task, const char *train_json, int keep);
#endif
